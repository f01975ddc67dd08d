package worker

import (
	"context"
	"crypto/sha256"
	"encoding/base32"
	"errors"
	"fmt"
	"strings"

	"github.com/airlockdev/airlock/internal/agentclient"
	"github.com/airlockdev/airlock/internal/agentproto"
	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/runtime"
	"github.com/airlockdev/airlock/internal/template"
	"github.com/airlockdev/airlock/internal/textclip"
)

// A template's start and ready commands (template.Config.StartCmd,
// ReadyCmd): when a sandbox starts afresh (a create; a wake or a fork
// whose processes start again) the worker starts the start command
// through the guest agent, in the background, as the template's user in
// its working directory with the sandbox's environment, under a process
// ID derived from the sandbox's (so a repeated step finds it started and
// it is listed with the sandbox's processes), then runs the ready wait
// (template.Config.ReadyScript) and returns once it exited 0. Build
// sandboxes start nothing: the build runs the commands itself.

// CodedError is a step's failure with a stable code of apiv1's error
// vocabulary, which the controller records as its operation's error code.
type CodedError struct {
	Code string
	Err  error
}

func (e *CodedError) Error() string { return e.Err.Error() }
func (e *CodedError) Unwrap() error { return e.Err }

// notReady is the permanent failure of a sandbox whose template's start
// or ready command did not make it ready.
func notReady(id model.SandboxID, format string, args ...any) error {
	return &CodedError{Code: apiv1.CodeTemplateNotReady,
		Err: fmt.Errorf("%w: sandbox %s: %s", ErrPermanent, id, fmt.Sprintf(format, args...))}
}

// startProcessID is the ID of the start command's process in sandbox id.
func startProcessID(id model.SandboxID) model.ProcessID {
	sum := sha256.Sum256([]byte("airlock-template-start\x00" + id.String()))
	enc := base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(sum[:16])
	return model.ProcessID("proc_" + strings.ToLower(enc))
}

// startsAfresh reports whether a sandbox made from a saved snapshot (a
// fork's, or a create's "snapshot") starts its processes again: the
// runtime's snapshots keep its files only.
func (w *Worker) startsAfresh() bool {
	return runtime.SnapshotKindOf(w.cfg.Runtime.Info().Capabilities) != model.SnapshotMemory
}

// startTemplate starts the start command of sb's template and waits until
// its ready command succeeds. A template without either costs nothing
// more than its (cached) defaults.
func (w *Worker) startTemplate(ctx context.Context, sb model.Sandbox) error {
	if w.cfg.TemplateDefaults == nil || sb.Metadata[model.BuildSandboxMetadata] != "" {
		return nil
	}
	def, err := w.cfg.TemplateDefaults(sb.Template)
	if err != nil {
		return fmt.Errorf("%w: template %s: %w", ErrPermanent, sb.Template, err)
	}
	c := def.Config
	if !c.HasStart() {
		return nil
	}
	if def.UserErr != nil {
		return notReady(sb.ID, "the template's start and ready commands cannot run: %v", def.UserErr)
	}
	agent, err := w.Agent(sb.ID)
	if err != nil {
		return err
	}
	var user *agentproto.User
	if def.User != nil {
		user = &agentproto.User{UID: def.User.UID, GID: def.User.GID}
	}
	if argv := c.StartArgv(); argv != nil {
		_, err := agent.Start(ctx, agentproto.StartRequest{ID: startProcessID(sb.ID).String(), Args: argv, Env: def.StartEnv(), Cwd: c.WorkingDir, User: user})
		var ae *agentclient.Error
		switch {
		case err == nil:
			w.log.InfoContext(ctx, "started the template's start command", "sandbox", sb.ID)
		case errors.Is(err, agentclient.ErrProcessExists):
			// A repeated step: started by the attempt before.
		case errors.As(err, &ae) && ae.Status < 500:
			return notReady(sb.ID, "the template's start command could not start: %v", err)
		default:
			return fmt.Errorf("sandbox %s: start the template's start command: %w", sb.ID, err)
		}
	}
	if c.ReadyCmd == "" {
		return nil
	}
	res, err := agent.Run(ctx, agentproto.StartRequest{ID: model.NewProcessID().String(), Args: c.ReadyScript(), Env: def.StartEnv(), Cwd: c.WorkingDir, User: user,
		TimeoutMillis: (c.ReadyTimeout() + template.ReadyGrace).Milliseconds()})
	if err != nil {
		return fmt.Errorf("sandbox %s: the template's ready command: %w", sb.ID, err)
	}
	if res.ExitCode != 0 {
		why := fmt.Sprintf("exit status %d", res.ExitCode)
		if res.ExitCode == template.ReadyTimeoutExit || res.Signal != "" {
			why = "timed out"
		}
		msg := fmt.Sprintf("the template's ready command did not succeed within %s (%s)", c.ReadyTimeout(), why)
		if out := strings.TrimSpace(string(res.Stdout) + string(res.Stderr)); out != "" {
			msg += ": " + textclip.Bytes(out, 512)
		}
		return notReady(sb.ID, "%s", msg)
	}
	return nil
}
