package control

import (
	"bytes"
	"encoding/json"
	"time"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/model"
)

// EnvdVersion is the envd version advertised to E2B SDKs. It gates SDK
// features (docs/e2b.md, "SDK versions"), each of which the envd
// translation implements: CloseStdin (≥ 0.5.2), octet-stream uploads
// (≥ 0.5.7), file metadata (X-Metadata-* headers, ≥ 0.6.2), watchDir's
// includeEntry (≥ 0.6.3) and allowNetworkMounts (≥ 0.6.4: a directory on
// NFS, CIFS, SMB or FUSE is refused without it). The JS SDK 2.51 gates
// nothing on a later version.
const EnvdVersion = "0.6.4"

// clientID is the deprecated Sandbox.clientID: any constant.
const clientID = "airlock"

// templateKey is the native metadata key that keeps the templateID an E2B
// caller named at create (the native sandbox holds only the digest), so
// that get and list answer it back. It is hidden from E2B metadata and may
// not be set through E2B. It says nothing else: whether the sandbox's
// guest ports are public is its own attribute (public_ports, set at
// create from network.allowPublicTraffic).
const templateKey = "e2b.airlock/template-id"

// nativeTemplate returns the Airlock template reference for an E2B
// templateID: the SDK defaults map to Airlock's templates of the same
// purpose; anything else names an Airlock template (name, name:tag or
// digest) as is.
func nativeTemplate(e2bID string) string {
	switch e2bID {
	case "base": // the SDK's default
		return "default"
	case "code-interpreter-v1": // @e2b/code-interpreter's default
		return "code-interpreter"
	}
	return e2bID
}

// sandboxOut is E2B's Sandbox (create, connect, resume).
type sandboxOut struct {
	SandboxID          string  `json:"sandboxID"`
	TemplateID         string  `json:"templateID"`
	ClientID           string  `json:"clientID"`
	EnvdVersion        string  `json:"envdVersion"`
	EnvdAccessToken    string  `json:"envdAccessToken,omitempty"`
	Domain             *string `json:"domain"`
	TrafficAccessToken *string `json:"trafficAccessToken"`
}

// lifecycleOut is SandboxDetail.lifecycle.
type lifecycleOut struct {
	AutoResume bool   `json:"autoResume"`
	OnTimeout  string `json:"onTimeout"` // kill or pause
}

// listedOut is E2B's ListedSandbox.
type listedOut struct {
	TemplateID  string            `json:"templateID"`
	SandboxID   string            `json:"sandboxID"`
	ClientID    string            `json:"clientID"`
	StartedAt   time.Time         `json:"startedAt"`
	EndAt       time.Time         `json:"endAt"`
	CPUCount    int               `json:"cpuCount"`
	MemoryMB    int               `json:"memoryMB"`
	DiskSizeMB  int               `json:"diskSizeMB"`
	Metadata    map[string]string `json:"metadata"`
	State       e2bState          `json:"state"`
	EnvdVersion string            `json:"envdVersion"`
}

// detailOut is E2B's SandboxDetail.
type detailOut struct {
	listedOut
	EnvdAccessToken     string        `json:"envdAccessToken,omitempty"`
	Domain              *string       `json:"domain"`
	AllowInternetAccess *bool         `json:"allowInternetAccess"`
	Lifecycle           *lifecycleOut `json:"lifecycle,omitempty"`
	// VolumeMounts are E2B's SandboxVolumeMount: a volume's name and path.
	VolumeMounts []volumeMountIn `json:"volumeMounts"`
}

// noDeadlineSpan is how far after its start endAt lies for a sandbox
// without a deadline (created natively without a timeout): the longest
// timeout Airlock accepts, i.e. "not before a year from its start".
const noDeadlineSpan = model.MaxTimeout

// templateIDOf returns the templateID an E2B caller named at create, or,
// for a sandbox created natively, its template digest.
func templateIDOf(sb apiv1.Sandbox) string {
	if t := sb.Metadata[templateKey]; t != "" {
		return t
	}
	return sb.Template
}

// e2bMetadata returns the sandbox's metadata without the reserved keys
// (templateKey, MaskKey).
func e2bMetadata(sb apiv1.Sandbox) map[string]string {
	out := make(map[string]string, len(sb.Metadata))
	for k, v := range sb.Metadata {
		if k != templateKey && k != MaskKey {
			out[k] = v
		}
	}
	return out
}

// endAt is the sandbox's deadline; without one, its start plus
// noDeadlineSpan.
func endAt(sb apiv1.Sandbox) time.Time {
	if sb.TimeoutAt != nil {
		return sb.TimeoutAt.UTC()
	}
	return sb.CreatedAt.UTC().Add(noDeadlineSpan)
}

func listed(sb apiv1.Sandbox, st e2bState) listedOut {
	return listedOut{
		TemplateID:  templateIDOf(sb),
		SandboxID:   sb.ID,
		ClientID:    clientID,
		StartedAt:   sb.CreatedAt.UTC(),
		EndAt:       endAt(sb),
		CPUCount:    sb.CPUs,
		MemoryMB:    sb.MemoryMiB,
		DiskSizeMB:  sb.DiskMiB,
		Metadata:    e2bMetadata(sb),
		State:       st,
		EnvdVersion: EnvdVersion,
	}
}

// allowInternet says whether the sandbox's egress policy defaults to
// public (nil: the server's default, not known here).
func allowInternet(sb apiv1.Sandbox) *bool {
	if sb.Egress == nil || sb.Egress.Default == "" {
		return nil
	}
	v := sb.Egress.Default == "public"
	return &v
}

func onTimeoutOut(sb apiv1.Sandbox) *lifecycleOut {
	on := "kill"
	if sb.OnTimeout == string(model.OnTimeoutSuspend) {
		on = "pause"
	}
	// Sandbox traffic for a suspended sandbox wakes it (the gateway), so
	// auto-resume is always on.
	return &lifecycleOut{AutoResume: true, OnTimeout: on}
}

// errorBody is the E2B control-plane error: code is the HTTP status.
type errorBody struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

// createIn is E2B's NewSandbox / NewSandboxV2. Fields Airlock cannot
// honour are kept raw so their presence can be refused.
type createIn struct {
	TemplateID          string            `json:"templateID"`
	Timeout             *int64            `json:"timeout"`
	Metadata            map[string]string `json:"metadata"`
	EnvVars             map[string]string `json:"envVars"`
	AutoPause           *bool             `json:"autoPause"`
	AutoPauseMemory     *bool             `json:"autoPauseMemory"`
	AutoResume          *autoResumeIn     `json:"autoResume"`
	Secure              *bool             `json:"secure"`
	AllowInternetAccess *bool             `json:"allow_internet_access"`
	Network             *networkIn        `json:"network"`
	IAM                 json.RawMessage   `json:"iam"`
	MCP                 json.RawMessage   `json:"mcp"`
	VolumeMounts        json.RawMessage   `json:"volumeMounts"`
}

type autoResumeIn struct {
	Enabled bool `json:"enabled"`
}

// networkIn is SandboxNetworkConfig.
type networkIn struct {
	AllowOut           []string        `json:"allowOut"`
	DenyOut            []string        `json:"denyOut"`
	AllowPublicTraffic *bool           `json:"allowPublicTraffic"`
	MaskRequestHost    *string         `json:"maskRequestHost"`
	Rules              json.RawMessage `json:"rules"`
	EgressProxy        json.RawMessage `json:"egressProxy"`
	HTTPSPorts         json.RawMessage `json:"httpsPorts"`
}

// connectIn is ConnectSandbox(V2) and the resume body.
type connectIn struct {
	Timeout   *int64 `json:"timeout"`
	Memory    *bool  `json:"memory"`
	AutoPause *bool  `json:"autoPause"`
}

type timeoutIn struct {
	Timeout *int64 `json:"timeout"`
}

type refreshIn struct {
	Duration *int64 `json:"duration"`
}

type pauseIn struct {
	Memory *bool `json:"memory"`
}

// present reports whether a raw optional field carries a value.
func present(raw json.RawMessage) bool {
	return len(raw) > 0 && string(raw) != "null"
}

// isObject reports whether raw (valid JSON) is an object.
func isObject(raw json.RawMessage) bool {
	return bytes.HasPrefix(bytes.TrimSpace(raw), []byte("{"))
}
