package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/client"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/template/recipe"
	"github.com/airlockdev/airlock/internal/textclip"
)

// maxRecipeBytes bounds the recipe file `template build` reads and sends.
const maxRecipeBytes = 256 << 10

func (a *app) templateBuildCommand() *cobra.Command {
	var (
		file, name, contextDir string
		detach                 bool
	)
	cmd := &cobra.Command{
		Use:   "build -f RECIPE",
		Short: "Build a template from a recipe",
		Long: "Build a template from a recipe (YAML: a Debian suite or a template to start from,\n" +
			"packages, files to copy, commands to run, env, workdir, user; see docs/templates.md).\n" +
			"The recipe file is read here and its text sent to the server, which builds it in the\n" +
			"background; the command follows the build's log until it is done (a progress line on\n" +
			"a terminal, the log's lines otherwise) and exits non-zero with the build's error if it\n" +
			"fails. Copy sources are read on the server's host from --context (default: the\n" +
			"recipe file's directory, made absolute). --detach prints the build ID and returns;\n" +
			"follow it later with `airlock build log ID`. Needs an admin key.",
		Example: "  airlock template build -f python.yaml --name python\n" +
			"  airlock template build -f app/recipe.yaml --name app --context /srv/app --detach",
		Args: exactArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if file == "" {
				return usageErrorf("-f RECIPE is required")
			}
			text, err := readRecipe(file)
			if err != nil {
				return err
			}
			r, err := recipe.Parse([]byte(text))
			if err != nil {
				return usageErrorf("%s: %w", file, err)
			}
			req := apiv1.ImportTemplateRequest{Recipe: text}
			// The context goes with recipes that copy files (or when given):
			// a server on another host need not have the recipe's directory.
			if contextDir == "" && slices.ContainsFunc(r.Steps(), func(s recipe.Step) bool { return s.Copy != nil }) {
				contextDir = filepath.Dir(file)
			}
			if contextDir != "" {
				if req.Context, err = filepath.Abs(contextDir); err != nil {
					return fmt.Errorf("making %s absolute: %w", contextDir, err)
				}
			}
			if req.Name, err = nameFlag(name); err != nil {
				return err
			}
			return a.startBuild(cmd.Context(), req, detach)
		},
	}
	fs := cmd.Flags()
	fs.StringVarP(&file, "file", "f", "", "the recipe file (YAML)")
	fs.StringVar(&name, "name", "", "name[:tag] to point at the template when the build succeeds (tag latest if none)")
	fs.StringVar(&contextDir, "context", "", "directory on the server's host that the recipe's copy sources are relative to (default, for a recipe with copy steps: the recipe file's directory)")
	fs.BoolVar(&detach, "detach", false, "print the build ID and return without following the build")
	return cmd
}

func readRecipe(file string) (string, error) {
	f, err := os.Open(file)
	if err != nil {
		return "", err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxRecipeBytes+1))
	if err != nil {
		return "", fmt.Errorf("read %s: %w", file, err)
	}
	if len(b) > maxRecipeBytes {
		return "", usageErrorf("recipe %s is larger than %d bytes", file, maxRecipeBytes)
	}
	if len(strings.TrimSpace(string(b))) == 0 {
		return "", usageErrorf("recipe %s is empty", file)
	}
	return string(b), nil
}

func nameFlag(name string) (string, error) {
	if name == "" {
		return "", nil
	}
	n, err := model.ParseTaggedName(name)
	if err != nil {
		return "", usageErrorf("--name: %w", err)
	}
	return n.String(), nil
}

// startBuild queues a build and, unless detach, follows it to its end.
func (a *app) startBuild(ctx context.Context, req apiv1.ImportTemplateRequest, detach bool) error {
	c, err := a.client()
	if err != nil {
		return err
	}
	b, err := c.ImportTemplate(ctx, req)
	if err != nil {
		return err
	}
	if detach {
		if a.flags.output == outputJSON {
			return a.printer().print(b, func(io.Writer) {})
		}
		fmt.Fprintln(a.env.Stdout, b.ID)
		return nil
	}
	return a.followBuild(ctx, c, b, true)
}

// followBuild follows build b's log to its end and prints the result: the
// template's digest, or the build's error (a non-zero exit).
func (a *app) followBuild(ctx context.Context, c *client.Client, b apiv1.Build, printResult bool) error {
	id, err := model.ParseBuildID(b.ID)
	if err != nil {
		return err
	}
	ui := newBuildUI(a.env.Stderr, b)
	stopTicking := ui.tick()
	done, err := c.FollowBuild(ctx, id, true, ui.event)
	stopTicking()
	ui.end()
	if err != nil {
		return err
	}
	if done.State == string(model.BuildFailed) {
		msg := "the build failed"
		if done.Error != nil {
			msg = done.Error.Code + ": " + done.Error.Message
		}
		return fmt.Errorf("build %s failed: %s (its log: airlock build log %s)", done.ID, msg, done.ID)
	}
	if !printResult {
		return nil
	}
	return a.printer().build(done)
}

// waitForTemplate shows the progress of the build that is to provide the
// template named ref, if one is under way, before a create that needs it.
func (a *app) waitForTemplate(ctx context.Context, c *client.Client, ref string) error {
	if ref == "" {
		ref = model.DefaultTemplateName.String()
	}
	if strings.HasPrefix(ref, "sha256:") {
		return nil
	}
	b, ok, err := c.ActiveBuild(ctx, ref)
	if err != nil || !ok {
		return nil // the create waits server-side all the same
	}
	fmt.Fprintf(a.env.Stderr, "template %s is being built (build %s); waiting for it\n", ref, b.ID)
	return a.followBuild(ctx, c, b, false)
}

// buildUI shows a build's progress: on a terminal one line redrawn in
// place (steps, bytes, elapsed time and the log's last line); otherwise
// the log's lines as they come.
type buildUI struct {
	mu       sync.Mutex
	w        io.Writer
	tty      bool
	width    int
	build    apiv1.Build
	start    time.Time
	prog     apiv1.BuildProgressEventData
	lastLine string
	partial  string
	drawn    bool
}

func newBuildUI(w io.Writer, b apiv1.Build) *buildUI {
	ui := &buildUI{w: w, build: b, start: time.Now(), width: 80}
	if !b.CreatedAt.IsZero() && b.CreatedAt.Before(ui.start) {
		ui.start = b.CreatedAt // the time shown is the build's
	}
	if f, ok := w.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		ui.tty = true
		if wd, _, err := term.GetSize(int(f.Fd())); err == nil && wd > 20 {
			ui.width = wd
		}
	}
	return ui
}

// tick redraws the progress line every second (the elapsed time moves
// while the log is quiet) until the returned function is called.
func (ui *buildUI) tick() (stop func()) {
	if !ui.tty {
		return func() {}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				ui.mu.Lock()
				ui.draw()
				ui.mu.Unlock()
			}
		}
	}()
	return func() { close(done); wg.Wait() }
}

func (ui *buildUI) event(ev client.BuildEvent) error {
	ui.mu.Lock()
	defer ui.mu.Unlock()
	if ev.Progress != nil {
		ui.prog = *ev.Progress
	}
	if ev.Log != "" {
		if !ui.tty {
			_, err := io.WriteString(ui.w, ev.Log)
			return err
		}
		text := ui.partial + ev.Log
		lines := strings.Split(text, "\n")
		ui.partial = lines[len(lines)-1]
		for i := len(lines) - 2; i >= 0; i-- {
			if l := strings.TrimSpace(lines[i]); l != "" {
				ui.lastLine = l
				break
			}
		}
	}
	if ui.tty {
		ui.draw()
	}
	return nil
}

// status is the progress line's text.
func (ui *buildUI) status() string {
	var parts []string
	what := ui.build.Name
	if what == "" {
		what = ui.build.Source
	}
	parts = append(parts, fmt.Sprintf("building %s", what))
	if p := ui.prog; p.StepsTotal > 0 {
		parts = append(parts, fmt.Sprintf("step %d/%d (%d cached)", p.StepsDone, p.StepsTotal, p.StepsCached))
	}
	if ui.prog.Bytes > 0 {
		parts = append(parts, byteSize(ui.prog.Bytes))
	}
	parts = append(parts, time.Since(ui.start).Truncate(time.Second).String())
	s := strings.Join(parts, " · ")
	if ui.lastLine != "" {
		s += " · " + ui.lastLine
	}
	return s
}

func (ui *buildUI) draw() {
	s := []rune(ui.status())
	if len(s) > ui.width-1 {
		s = append(s[:ui.width-2], '…')
	}
	fmt.Fprintf(ui.w, "\r\033[K%s", string(s))
	ui.drawn = true
}

// end clears the progress line (a terminal) or ends a partial last line.
func (ui *buildUI) end() {
	ui.mu.Lock()
	defer ui.mu.Unlock()
	if ui.tty && ui.drawn {
		fmt.Fprint(ui.w, "\r\033[K")
	}
}

func (a *app) buildCommand() *cobra.Command {
	return group("build", "Follow and list template builds", a.buildLogCommand(), a.buildListCommand())
}

func (a *app) buildLogCommand() *cobra.Command {
	var follow bool
	cmd := &cobra.Command{
		Use:   "log BUILD_ID",
		Short: "Print a template build's log, following it until the build ends",
		Long: "Print the log of a template build (`template import`, `template build`, or the\n" +
			"server's default build), following it until the build ends; exits non-zero if the\n" +
			"build failed. --follow=false prints the log so far and returns.",
		Args: exactArgs("BUILD_ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := model.ParseBuildID(args[0])
			if err != nil {
				return usageErrorf("%w", err)
			}
			c, err := a.client()
			if err != nil {
				return err
			}
			b, err := c.FollowBuild(cmd.Context(), id, follow, func(ev client.BuildEvent) error {
				if ev.Log != "" {
					_, err := io.WriteString(a.env.Stdout, ev.Log)
					return err
				}
				return nil
			})
			if err != nil {
				return err
			}
			if b.State == string(model.BuildFailed) {
				msg := ""
				if b.Error != nil {
					msg = b.Error.Code + ": " + b.Error.Message
				}
				return fmt.Errorf("build %s failed: %s", b.ID, msg)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&follow, "follow", true, "follow the log until the build ends")
	return cmd
}

func (a *app) buildListCommand() *cobra.Command {
	var name, state string
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List template builds, newest first",
		Args:  exactArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			l, err := c.ListBuilds(cmd.Context(), client.BuildFilter{Name: name, State: state})
			if err != nil {
				return err
			}
			return a.printer().buildList(l)
		},
	}
	cmd.Flags().StringVar(&name, "name", "", "only builds that name this template")
	cmd.Flags().StringVar(&state, "state", "", "only builds in this state: pending, running, succeeded, failed or active")
	return cmd
}

func (p printer) build(b apiv1.Build) error {
	return p.print(b, func(w io.Writer) {
		fmt.Fprintf(w, "Build:\t%s\n", b.ID)
		fmt.Fprintf(w, "State:\t%s\n", b.State)
		if b.Digest != "" {
			fmt.Fprintf(w, "Digest:\t%s\n", b.Digest)
		}
		fmt.Fprintf(w, "Name:\t%s\n", orDash(b.Name))
		if b.Error != nil {
			fmt.Fprintf(w, "Error:\t%s: %s\n", b.Error.Code, b.Error.Message)
		}
	})
}

func (p printer) buildList(l apiv1.BuildList) error {
	return p.print(l, func(w io.Writer) {
		fmt.Fprintln(w, "ID\tKIND\tNAME\tSTATE\tSOURCE\tCREATED")
		for _, b := range l.Builds {
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", b.ID, b.Kind, orDash(b.Name), b.State, textclip.Runes(b.Source, 50), timeText(b.CreatedAt))
		}
	})
}
