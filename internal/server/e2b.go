package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"time"

	"github.com/airlockdev/airlock/internal/api"
	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/auth"
	"github.com/airlockdev/airlock/internal/client"
	"github.com/airlockdev/airlock/internal/e2b"
	"github.com/airlockdev/airlock/internal/e2b/control"
	"github.com/airlockdev/airlock/internal/e2b/envd"
	"github.com/airlockdev/airlock/internal/e2b/envdfs"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/store"
	"github.com/airlockdev/airlock/internal/template"
)

// e2bGateway puts the E2B front door in front of native (Airlock's API and
// data plane): the E2B control API, envd's services and guest-port
// routing, all translated to calls of this server's own API, which inproc
// carries in-process (never over the network; selfURL is the base URL
// they name). The returned Watchers hold E2B's polling file watchers;
// close them at shutdown.
func e2bGateway(ctx context.Context, native http.Handler, wrap func(http.Handler) http.Handler, inproc *api.InProcess, st store.Store, keys *auth.Keyring, verifier *auth.Verifier, selfURL, domain string, tpls e2bTemplateBuilds, log *slog.Logger) (*e2b.Gateway, *envdfs.Watchers, error) {
	self, err := loopbackURL(selfURL)
	if err != nil {
		return nil, nil, err
	}
	// No redirects followed: some answers come from servers in sandboxes.
	httpc := &http.Client{Transport: inproc, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	mint := func(sb model.SandboxID, project model.ProjectID) (string, error) {
		return keys.Issuer().IssueSandbox(auth.SandboxClaims{Sandbox: sb, Project: project})
	}
	ctl, err := control.New(control.Config{
		Native: func(key string) (*client.Client, error) {
			return client.New(self, key, client.WithHTTPClient(httpc), client.WithUserAgent("airlock-e2b-control"))
		},
		AccessToken: func(ctx context.Context, sb apiv1.Sandbox) (string, error) {
			id, err := model.ParseSandboxID(sb.ID)
			if err != nil {
				return "", err
			}
			rec, err := st.GetSandboxByID(ctx, id)
			if err != nil {
				return "", fmt.Errorf("sandbox %s: %w", id, err)
			}
			return mint(rec.ID, rec.ProjectID)
		},
		VolumeToken: func(ctx context.Context, v apiv1.Volume) (string, error) {
			id, err := model.ParseVolumeID(v.ID)
			if err != nil {
				return "", err
			}
			rec, err := st.GetVolumeByID(ctx, id)
			if err != nil {
				return "", fmt.Errorf("volume %s: %w", id, err)
			}
			return keys.Issuer().IssueVolume(auth.VolumeClaims{Volume: rec.ID, Project: rec.ProjectID})
		},
		Domain:          domain,
		Logger:          log.With("component", "e2b-control"),
		TemplateFiles:   tpls.files,
		TemplateHasUser: tpls.hasUser(st),
		Builds:          e2bBuildRecords{st},
		Caller:          tpls.caller,
		Node:            tpls.node,
	})
	if err != nil {
		return nil, nil, err
	}
	if err := ctl.ReconcileBuilds(ctx); err != nil {
		return nil, nil, err
	}
	envdLog := log.With("component", "e2b-envd")
	watchers := envdfs.NewWatchers(envdLog)
	procPath, procHandler := envd.NewProcessHandler(envdLog)
	fsPath, fsHandler := envdfs.NewHandler(envdLog, watchers)
	gw, err := e2b.New(e2b.Config{
		Native:      native,
		Control:     wrap(ctl), // request IDs, the access log, panic recovery, the body's read deadline
		OwnsControl: control.Owns,
		Process:     e2b.Service{Path: procPath, Handler: procHandler},
		Filesystem:  e2b.Service{Path: fsPath, Handler: fsHandler},
		Files:       envdfs.FilesHandler(envdLog),
		Sandboxes:   st,
		API:         inproc,
		Verify: func(token string) (model.SandboxID, model.ProjectID, error) {
			c, err := verifier.VerifySandbox(token)
			return c.Sandbox, c.Project, err
		},
		Tokens: func(sb model.SandboxID, project model.ProjectID) ([]string, error) {
			return keys.SandboxTokens(auth.SandboxClaims{Sandbox: sb, Project: project}, time.Now())
		},
		LiveSandboxes: func(ctx context.Context) ([]model.Sandbox, error) {
			// Every placed sandbox of every node (signed /files URLs in
			// URL mode name no sandbox: internal/e2b/signedurl.go).
			nodes, err := st.ListNodes(ctx)
			if err != nil {
				return nil, err
			}
			var out []model.Sandbox
			for _, n := range nodes {
				sbs, err := st.ListSandboxesOnNode(ctx, n.ID)
				if err != nil {
					return nil, err
				}
				out = append(out, sbs...)
			}
			return out, nil
		},
		Changes: st.Watch, // sandboxes created or deleted anywhere make the index stale
		Domain:  domain,
		SelfURL: self,
		Logger:  log.With("component", "e2b"),
	})
	if err != nil {
		watchers.Close()
		return nil, nil, err
	}
	return gw, watchers, nil
}

// loopbackURL turns the listener's URL into one this process can dial:
// an unspecified address (0.0.0.0, ::) becomes loopback.
func loopbackURL(base string) (string, error) {
	u, err := url.Parse(base)
	if err != nil {
		return "", fmt.Errorf("server URL %q: %w", base, err)
	}
	host, port, err := net.SplitHostPort(u.Host)
	if err != nil {
		return "", fmt.Errorf("server URL %q: %w", base, err)
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		if ip.To4() != nil {
			host = "127.0.0.1"
		} else {
			host = "::1"
		}
	}
	u.Host = net.JoinHostPort(host, port)
	return u.String(), nil
}

// e2bTemplateBuilds configures E2B's template build API: files is the
// directory of its uploads and build contexts ("": the API answers 501),
// templates this node's template store (nil on an api replica: builds
// start as root), node this server's node, keys the API's key check.
type e2bTemplateBuilds struct {
	files     string
	templates *template.Store
	node      model.NodeID
	keys      func(ctx context.Context, token string) (model.ProjectID, model.Role, bool, error)
}

// caller is control.Config.Caller on the API's key check.
func (t e2bTemplateBuilds) caller(ctx context.Context, key string) (control.Caller, bool, error) {
	if t.keys == nil {
		return control.Caller{}, false, errors.New("e2b template builds: no key check configured")
	}
	project, role, ok, err := t.keys(ctx, key)
	return control.Caller{Project: project, Admin: role == model.RoleAdmin}, ok, err
}

// e2bBuildRecords is the store's E2B builds as control.BuildRecords: its
// ErrNotFound and ErrStateChanged wrapped as control's.
type e2bBuildRecords struct{ store.E2BBuilds }

func e2bBuildErr(err error) error {
	switch {
	case errors.Is(err, store.ErrNotFound):
		return fmt.Errorf("%w: %w", control.ErrBuildNotFound, err)
	case errors.Is(err, store.ErrStateChanged):
		return fmt.Errorf("%w: %w", control.ErrBuildStateChanged, err)
	}
	return err
}

func (r e2bBuildRecords) GetE2BBuild(ctx context.Context, project model.ProjectID, id model.E2BBuildID) (model.E2BBuild, error) {
	b, err := r.E2BBuilds.GetE2BBuild(ctx, project, id)
	return b, e2bBuildErr(err)
}

func (r e2bBuildRecords) StartE2BBuild(ctx context.Context, project model.ProjectID, id model.E2BBuildID, node model.NodeID, files []string, now time.Time) (model.E2BBuild, error) {
	b, err := r.E2BBuilds.StartE2BBuild(ctx, project, id, node, files, now)
	return b, e2bBuildErr(err)
}

func (r e2bBuildRecords) SetE2BBuildNative(ctx context.Context, id model.E2BBuildID, native model.BuildID, now time.Time) error {
	return e2bBuildErr(r.E2BBuilds.SetE2BBuildNative(ctx, id, native, now))
}

func (r e2bBuildRecords) ReplaceE2BBuildNative(ctx context.Context, id model.E2BBuildID, from, to model.BuildID, now time.Time) error {
	return e2bBuildErr(r.E2BBuilds.ReplaceE2BBuildNative(ctx, id, from, to, now))
}

func (r e2bBuildRecords) EndE2BBuild(ctx context.Context, id model.E2BBuildID, status model.E2BBuildStatus, reason string, now time.Time) error {
	return e2bBuildErr(r.E2BBuilds.EndE2BBuild(ctx, id, status, reason, now))
}

// hasUser reports whether a template (a reference the store resolves)
// has an account of that name in its own /etc/passwd.
func (t e2bTemplateBuilds) hasUser(st store.Store) func(ctx context.Context, ref, user string) (bool, error) {
	return func(ctx context.Context, ref, user string) (bool, error) {
		if t.templates == nil {
			return false, nil
		}
		r, err := model.ParseTemplateRef(ref)
		if err != nil {
			return false, nil
		}
		tpl, err := st.ResolveTemplate(ctx, r)
		if errors.Is(err, store.ErrNotFound) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		if !t.templates.Has(tpl.Digest) {
			return false, nil
		}
		_, err = t.templates.ResolveUser(tpl.Digest, user)
		return err == nil, nil
	}
}

// e2bTemplatesDir (in the data dir) holds E2B template builds' uploads and
// build contexts.
const e2bTemplatesDir = "e2b-templates"
