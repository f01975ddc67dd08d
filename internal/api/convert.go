package api

import (
	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/model"
)

// The functions below turn domain records into wire types. Maps and slices
// are never nil, so they encode as {} and [] rather than null.

func sandboxOut(sb model.Sandbox) apiv1.Sandbox {
	out := apiv1.Sandbox{
		ID:           sb.ID.String(),
		Template:     sb.Template.String(),
		CPUs:         sb.Resources.CPUs,
		MemoryMiB:    sb.Resources.MemoryMiB,
		DiskMiB:      sb.Resources.DiskMiB,
		Env:          nonNilMap(sb.Env),
		Metadata:     nonNilMap(sb.Metadata),
		State:        string(sb.State),
		StateReason:  sb.StateReason,
		Snapshot:     snapshotOut(sb.Snapshot),
		Runtime:      sb.Runtime,
		NodeID:       string(sb.NodeID),
		Environment:  string(sb.Environment),
		Source:       string(sb.Source),
		PublicPorts:  sb.PublicPorts,
		FromSnapshot: sb.FromSnapshot.String(),
		CreatedAt:    sb.CreatedAt.UTC(),
		UpdatedAt:    sb.UpdatedAt.UTC(),
	}
	if len(sb.NodeSelector) > 0 {
		out.NodeSelector = map[string]string(sb.NodeSelector)
	}
	for _, m := range sb.VolumeMounts {
		out.VolumeMounts = append(out.VolumeMounts, apiv1.VolumeMount{Volume: m.Volume.String(), Path: m.Path.String()})
	}
	timeoutsOut(&out, sb)
	return out
}

func operationOut(op model.Operation) apiv1.Operation {
	out := apiv1.Operation{
		ID:        op.ID.String(),
		Kind:      string(op.Kind),
		State:     string(op.State),
		SandboxID: op.SandboxID.String(),
		Attempts:  op.Attempts,
		Source:    string(op.Source),
		CreatedAt: op.CreatedAt.UTC(),
		UpdatedAt: op.UpdatedAt.UTC(),
	}
	if op.Error != nil {
		out.Error = &apiv1.Error{Code: op.Error.Code, Message: op.Error.Message}
	}
	if op.FinishedAt != nil {
		t := op.FinishedAt.UTC()
		out.FinishedAt = &t
	}
	if !op.NotBefore.IsZero() && op.FinishedAt == nil {
		t := op.NotBefore.UTC()
		out.NotBefore = &t
	}
	return out
}

func templateOut(t model.Template) apiv1.Template {
	names := make([]string, 0, len(t.Names))
	for _, n := range t.Names {
		names = append(names, n.String())
	}
	return apiv1.Template{Digest: t.Digest.String(), Names: names, SizeBytes: t.SizeBytes, CreatedAt: t.CreatedAt.UTC(),
		Config: templateConfig(t.Manifest)}
}

func projectOut(p model.Project) apiv1.Project {
	return apiv1.Project{ID: p.ID.String(), Name: p.Name, CreatedAt: p.CreatedAt.UTC()}
}

func quotaOut(p model.ProjectID, q model.Quota, u model.Usage) apiv1.ProjectQuota {
	return apiv1.ProjectQuota{
		ProjectID: p.String(),
		Limits: apiv1.QuotaLimits{
			Sandboxes: q.Sandboxes.Ptr(), CPUs: q.CPUs.Ptr(), MemoryMiB: q.MemoryMiB.Ptr(), DiskMiB: q.DiskMiB.Ptr(),
		},
		Usage: apiv1.QuotaUsage{Sandboxes: u.Sandboxes, CPUs: u.CPUs, MemoryMiB: u.MemoryMiB, DiskMiB: u.DiskMiB},
	}
}

func apiKeyOut(k model.APIKey) apiv1.APIKey {
	out := apiv1.APIKey{
		ID:        k.ID.String(),
		ProjectID: k.ProjectID.String(),
		Role:      string(k.Role),
		Name:      k.Name,
		CreatedAt: k.CreatedAt.UTC(),
	}
	if k.RevokedAt != nil {
		t := k.RevokedAt.UTC()
		out.RevokedAt = &t
	}
	return out
}

func nonNilMap[M ~map[string]string](m M) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}
