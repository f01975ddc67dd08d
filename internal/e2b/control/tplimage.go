package control

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/client"
	"github.com/airlockdev/airlock/internal/model"
)

// fromImage of an image that is not a template of this server: the build
// first imports it from its registry through the native import
// (POST /v1/templates {source: "docker://IMAGE"}: Docker Hub and
// "library/" as docker pull defaults them, tags and digests; the template
// store does not fetch the layers of an image manifest it imported
// before), then, once a status call finds the import done, queues the
// recipe on the imported template. fromImageRegistry of E2B's "registry"
// type hands its username and password to that import only (kept in the
// server's memory for it, never stored or logged); "aws" and "gcp" are
// refused (501). A failed pull fails the E2B build with the image named.
// The build's record (tplbuilds.go) is building on the pull's native
// build first, then on the recipe's.

// imagePull is a fromImage to pull.
type imagePull struct {
	image string
	auth  *apiv1.RegistryAuth
}

// hasRegistry reports whether fromImageRegistry was given.
func hasRegistry(raw json.RawMessage) bool {
	return len(raw) > 0 && string(raw) != "null"
}

// parseRegistryAuth parses fromImageRegistry: nil when absent.
func parseRegistryAuth(raw json.RawMessage) (*apiv1.RegistryAuth, error) {
	if !hasRegistry(raw) {
		return nil, nil
	}
	var reg struct {
		Type     string `json:"type"`
		Username string `json:"username"`
		Password string `json:"password"`
	}
	if err := json.Unmarshal(raw, &reg); err != nil {
		return nil, badRequest("fromImageRegistry: %v", err)
	}
	switch reg.Type {
	case "registry":
		if reg.Username == "" || reg.Password == "" {
			return nil, badRequest("fromImageRegistry of type registry needs a username and a password")
		}
		return &apiv1.RegistryAuth{Username: reg.Username, Password: reg.Password}, nil
	case "aws", "gcp":
		return nil, notImplemented("fromImageRegistry of type %s is not supported by Airlock: give the registry's username and password (type registry), or import the image with airlock template import", reg.Type)
	}
	return nil, badRequest("fromImageRegistry: type %q is not one of registry, aws, gcp", reg.Type)
}

// queuePull queues the native import of p (no name: the recipe names the
// result).
func (h *Handler) queuePull(ctx context.Context, c *client.Client, p imagePull) (apiv1.Build, error) {
	nb, err := c.ImportTemplate(ctx, apiv1.ImportTemplateRequest{Source: "docker://" + p.image, RegistryAuth: p.auth})
	if err != nil {
		var ae *client.APIError
		if errors.As(err, &ae) && ae.Status == 400 {
			return apiv1.Build{}, badRequest("fromImage %q is not an image reference: %s", p.image, ae.Message)
		}
		return apiv1.Build{}, err
	}
	return nb, nil
}

// pendingPull is what a build whose fromImage is being pulled builds once
// the image is in: its steps, as this server took them (the uploaded
// files they copy are on this server).
type pendingPull struct {
	start    tplBuildStart
	scope    string
	starting bool // a status call is queueing the recipe
}

// pullTable holds this server's builds waiting on a pull. It is memory:
// a server that restarts forgets them, and their builds end in error
// (advancePull) rather than wait for ever.
type pullTable struct {
	mu sync.Mutex
	m  map[model.E2BBuildID]*pendingPull
}

func (t *pullTable) put(id model.E2BBuildID, p pendingPull) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.m == nil {
		t.m = map[model.E2BBuildID]*pendingPull{}
	}
	t.m[id] = &p
}

// claim takes id's pending pull for the caller to queue its recipe: ok
// false when there is none (held reports whether one is being queued).
func (t *pullTable) claim(id model.E2BBuildID) (p pendingPull, ok, held bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	x := t.m[id]
	switch {
	case x == nil:
		return pendingPull{}, false, false
	case x.starting:
		return pendingPull{}, false, true
	}
	x.starting = true
	return *x, true, true
}

func (t *pullTable) done(id model.E2BBuildID) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.m, id)
}

// advancePull answers build b, whose native build pb is the pull of its
// fromImage: building while the pull runs; error with the image named if
// it failed; once it succeeded, the server that took the build queues
// the recipe on the imported template and moves b to that build
// (ReplaceE2BBuildNative: once, whoever asks). A build whose server
// restarted meanwhile ends in error (its steps were that server's memory).
func (h *Handler) advancePull(ctx context.Context, c *client.Client, b model.E2BBuild, pb apiv1.Build) (model.E2BBuildStatus, string, error) {
	if b.Status.Ended() {
		return b.Status, b.Reason, nil
	}
	image := strings.TrimPrefix(pb.Source, "docker://")
	switch pb.State {
	case "failed":
		msg := "the pull failed"
		if pb.Error != nil {
			msg = pb.Error.Message + " (" + pb.Error.Code + ")"
		}
		h.pulls.done(b.ID)
		return h.endBuild(ctx, b, model.E2BBuildError, fmt.Sprintf("fromImage %s: the image could not be pulled: %s", image, msg))
	case "succeeded":
	default:
		return model.E2BBuildBuilding, "", nil
	}
	p, ok, held := h.pulls.claim(b.ID)
	if !ok {
		if held || b.Node != h.cfg.Node {
			return model.E2BBuildBuilding, "", nil // being queued by another call, or by the server that took it
		}
		// Not remembered here: another call queued the steps (it forgets
		// the pull only after moving the build on, so a fresh read shows
		// that), or this server restarted since it took the build.
		cur, err := h.cfg.Builds.GetE2BBuild(ctx, b.ProjectID, b.ID)
		if err != nil {
			return "", "", err
		}
		if cur.Native != b.Native || cur.Status.Ended() {
			return cur.Status, cur.Reason, nil
		}
		return h.endBuild(ctx, cur, model.E2BBuildError, fmt.Sprintf("fromImage %s was pulled, but this server restarted before it queued the build's steps; start the build again", image))
	}
	defer h.pulls.done(b.ID)
	fail := func(err error) (model.E2BBuildStatus, string, error) {
		h.log.WarnContext(ctx, "e2b template build: the steps could not be queued after the pull", "build", b.ID, "err", err)
		return h.endBuild(ctx, b, model.E2BBuildError, fmt.Sprintf("fromImage %s was pulled (%s), but the build could not start: %v", image, pb.Digest, err))
	}
	base, err := h.baseOf(ctx, pb.Digest)
	if err != nil {
		return fail(err)
	}
	native, err := h.queueRecipe(ctx, c, b, p.start, base, p.scope)
	if err != nil {
		return fail(err)
	}
	if err := h.cfg.Builds.ReplaceE2BBuildNative(context.WithoutCancel(ctx), b.ID, b.Native, native, time.Now()); err != nil {
		if !errors.Is(err, ErrBuildStateChanged) {
			return "", "", err
		}
		// Ended meanwhile (by another server's status call): answer that.
		cur, gerr := h.cfg.Builds.GetE2BBuild(ctx, b.ProjectID, b.ID)
		if gerr != nil {
			return "", "", gerr
		}
		return cur.Status, cur.Reason, nil
	}
	return model.E2BBuildBuilding, "", nil
}
