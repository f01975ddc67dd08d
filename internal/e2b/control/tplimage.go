package control

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/client"
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

// startPull queues the import of p for build b.
func (h *Handler) startPull(ctx context.Context, c *client.Client, b tplBuild, start tplBuildStart, p imagePull) error {
	nb, err := c.ImportTemplate(ctx, apiv1.ImportTemplateRequest{Source: "docker://" + p.image, RegistryAuth: p.auth})
	if err != nil {
		var ae *client.APIError
		if errors.As(err, &ae) && ae.Status == 400 {
			return badRequest("fromImage %q is not an image reference: %s", p.image, ae.Message)
		}
		return err
	}
	h.tplBuilds.update(b.id, func(x *tplBuild) { x.pull, x.image, x.start = nb.ID, p.image, &start })
	return nil
}

// advancePull sets st from the pull pb of b while b's recipe has not
// started (done: st is b's state), and starts the recipe once the image is
// in (done false: the caller reads the recipe's state).
func (h *Handler) advancePull(ctx context.Context, c *client.Client, b tplBuild, pb apiv1.Build, st *tplStatus) (bool, error) {
	switch {
	case b.failed != "":
		st.status, st.reason = "error", b.failed
		return true, nil
	case pb.State == "failed":
		msg := "the pull failed"
		if pb.Error != nil {
			msg = pb.Error.Message + " (" + pb.Error.Code + ")"
		}
		st.status, st.reason = "error", fmt.Sprintf("fromImage %s: the image could not be pulled: %s", b.image, msg)
		return true, nil
	case pb.State != "succeeded":
		st.status = "building"
		return true, nil
	}
	claimed := false
	h.tplBuilds.update(b.id, func(x *tplBuild) {
		if !x.starting && x.native == "" && x.failed == "" {
			x.starting, claimed = true, true
		}
	})
	if !claimed {
		return false, nil
	}
	base, err := h.baseOf(ctx, pb.Digest)
	if err == nil {
		err = h.startRecipe(ctx, c, b, *b.start, base)
	}
	if err != nil {
		msg := fmt.Sprintf("fromImage %s was pulled (%s), but the build could not start: %v", b.image, pb.Digest, err)
		h.tplBuilds.update(b.id, func(x *tplBuild) { x.failed = msg })
		st.status, st.reason = "error", msg
		h.log.WarnContext(ctx, "e2b template build: the recipe could not start after the pull", "build", b.id, "err", err)
		return true, nil
	}
	return false, nil
}
