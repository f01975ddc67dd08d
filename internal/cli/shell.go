package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sync"
	"syscall"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/client"
	"github.com/airlockdev/airlock/internal/model"
)

// Terminal size of a shell whose stdin is not a terminal.
const (
	defaultRows = 24
	defaultCols = 80
)

func (a *app) shellCommand() *cobra.Command {
	var (
		f     commandFlags
		shell string
	)
	cmd := &cobra.Command{
		Use:   "shell SANDBOX [flags] [-- COMMAND [ARG...]]",
		Short: "Open an interactive shell in a sandbox",
		Long: "Run a shell (or COMMAND) in a running sandbox on a terminal the size of ours,\n" +
			"connected over a WebSocket: our terminal is put in raw mode, keys go to the\n" +
			"remote terminal, its size follows ours, and airlock exits with the shell's exit\n" +
			"code. When stdin is not a terminal it is forwarded as it is (24x80, no raw mode).\n" +
			"Flags go before SANDBOX.",
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usageErrorf("missing SANDBOX")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := parseArg(model.ParseSandboxID, args[0])
			if err != nil {
				return err
			}
			argv := []string{shell}
			if len(args) > 1 {
				if argv, err = commandArgs(cmd, args[1:]); err != nil {
					return err
				}
			}
			req, err := f.request(argv)
			if err != nil {
				return err
			}
			c, err := a.client()
			if err != nil {
				return err
			}
			code, err := a.shell(cmd.Context(), c, id, req)
			if err != nil {
				return err
			}
			return exitStatus{code}
		},
	}
	cmd.Flags().SetInterspersed(false)
	cmd.Flags().StringVar(&shell, "shell", "/bin/sh", "the shell to run when no COMMAND is given")
	cmd.Flags().StringArrayVar(&f.env, "env", nil, "environment variable KEY=VALUE of the shell (repeatable)")
	cmd.Flags().StringVar(&f.cwd, "cwd", "", "working directory inside the sandbox (default /)")
	return cmd
}

// shell runs req on a terminal in the sandbox, attached to ours, and
// returns the exit code airlock should end with.
func (a *app) shell(ctx context.Context, c *client.Client, sandbox model.SandboxID, req apiv1.CreateCommandRequest) (int, error) {
	fd, isTerm := terminalFD(a.env.Stdin)
	rows, cols := defaultRows, defaultCols
	if isTerm {
		if w, h, err := term.GetSize(fd); err == nil && w > 0 && h > 0 {
			rows, cols = h, w
		}
	}
	req.Stdin = true
	req.PTY = &apiv1.TermSize{Rows: rows, Cols: cols}
	cs, err := c.CreateCommand(ctx, sandbox, req)
	if err != nil {
		return 0, err
	}
	wsURL := cs.WebSocketURL
	if wsURL == "" {
		wsURL = apiv1.ProcessDataPath(cs.ProcessID, "ws")
	}
	ws, err := c.AttachWebSocket(ctx, wsURL, cs.AttachmentToken, 0)
	if err != nil {
		return 0, err
	}
	defer ws.Close()

	if isTerm {
		old, err := term.MakeRaw(fd)
		if err != nil {
			return 0, fmt.Errorf("put the terminal in raw mode: %w", err)
		}
		defer func() { _ = term.Restore(fd, old) }()
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	defer ws.Close() // unblocks a stdin or resize write before the wait
	sessCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	if isTerm {
		winch := make(chan os.Signal, 1)
		signal.Notify(winch, syscall.SIGWINCH)
		defer signal.Stop(winch)
		wg.Add(1)
		go func() {
			defer wg.Done()
			followSize(sessCtx, fd, winch, ws)
		}()
	}
	in, stopInput, stoppable := interruptibleInput(a.env.Stdin)
	defer stopInput() // runs before wg.Wait: ends the stdin copy
	if stoppable {
		wg.Add(1)
	}
	go func() {
		if stoppable {
			defer wg.Done()
		}
		forwardStdin(in, ws)
	}()
	return a.shellOutput(ws)
}

// shellOutput copies the remote terminal's output to ours until the exit.
func (a *app) shellOutput(ws *client.WebSocket) (int, error) {
	return a.copyEvents(ws.Next, "\r\n")
}

// followSize sends our terminal's size whenever it changes.
func followSize(ctx context.Context, fd int, winch <-chan os.Signal, ws *client.WebSocket) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-winch:
		}
		if w, h, err := term.GetSize(fd); err == nil && w > 0 && h > 0 {
			_ = ws.Resize(h, w)
		}
	}
}

// forwardStdin copies in to the shell's stdin; at its end it closes the
// shell's stdin (a terminal gets ^D).
func forwardStdin(in io.Reader, ws *client.WebSocket) {
	buf := make([]byte, 32<<10)
	for {
		n, err := in.Read(buf)
		if n > 0 {
			if _, werr := ws.Write(buf[:n]); werr != nil {
				return
			}
		}
		if errors.Is(err, io.EOF) {
			_ = ws.CloseStdin()
			return
		}
		if err != nil {
			return
		}
	}
}

// terminalFD returns r's file descriptor if r is a terminal.
func terminalFD(r io.Reader) (int, bool) {
	f, ok := r.(*os.File)
	if !ok {
		return 0, false
	}
	fd := int(f.Fd())
	return fd, term.IsTerminal(fd)
}
