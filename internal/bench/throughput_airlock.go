package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/client"
	"github.com/airlockdev/airlock/internal/model"
)

// The files download reads and upload writes (and removes after its
// check) in the sandbox.
const (
	throughputFile   = "/tmp/airlock-bench-throughput.bin"
	throughputUpload = "/tmp/airlock-bench-upload.bin"
)

// airlockThroughputCases measure one sandbox through the API. Before the
// clock: the SHA-256 of the stdout stream computed inside, and the file
// for downloads.
func airlockThroughputCases(ctx context.Context, e *execAirlock, data payload) ([]throughputCase, error) {
	n := strconv.FormatInt(data.n, 10)
	inside, err := e.output(ctx, "sh", "-c", "head -c "+n+" /dev/zero | sha256sum")
	if err != nil {
		return nil, fmt.Errorf("hash the stdout stream inside: %w", err)
	}
	zerosInside, err := parseSum(inside)
	if err != nil {
		return nil, err
	}
	if zerosInside != data.zerosSum {
		return nil, fmt.Errorf("sha256sum inside of %s zero bytes is %s, here %s", n, zerosInside, data.zerosSum)
	}
	file, err := model.ParseGuestPath(throughputFile)
	if err != nil {
		return nil, err
	}
	upFile, err := model.ParseGuestPath(throughputUpload)
	if err != nil {
		return nil, err
	}
	if _, err := e.a.c.Upload(ctx, e.id, file, 0o600, data.reader()); err != nil {
		return nil, fmt.Errorf("upload the download's file: %w", err)
	}
	name := "airlock-" + string(e.a.flavor)
	row := func(dir, method string) ThroughputRow {
		return ThroughputRow{Subject: name, Kind: KindAirlock, Runtime: string(e.a.flavor), Direction: dir, Method: method}
	}
	return []throughputCase{
		{row: row(DirStdout, "POST …/commands [head -c N /dev/zero] → attach (SSE, base64 in JSON events) → every stdout event hashed here → exit event; "+
			"the sum is compared with sha256sum of the same stream inside"),
			run: func(ctx context.Context) (time.Duration, error) {
				hc := newHashCounter()
				t0 := time.Now()
				if err := e.attachTo(ctx, apiv1.CreateCommandRequest{Args: []string{"head", "-c", n, "/dev/zero"}}, hc); err != nil {
					return 0, err
				}
				d := time.Since(t0)
				return d, hc.check(data.n, zerosInside)
			}},
		{row: row(DirStdin, "POST …/commands [sha256sum] with stdin, background → POST /data/v1/processes/{pid}/stdin?close=1 (streamed body) alongside the attach → exit event; "+
			"the sum printed inside is compared"),
			run: func(ctx context.Context) (time.Duration, error) {
				t0 := time.Now()
				out, err := e.stdinRun(ctx, data)
				if err != nil {
					return 0, err
				}
				d := time.Since(t0)
				sum, err := parseSum(out)
				if err == nil && sum != data.sum {
					err = fmt.Errorf("sha256sum inside printed %s, want %s", sum, data.sum)
				}
				return d, err
			}},
		{row: row(DirUpload, "client.Upload of N bytes to "+throughputUpload+" (transfer + streamed PUT) → its answer; sha256sum of the file inside is compared and the file removed, untimed"),
			run: func(ctx context.Context) (time.Duration, error) {
				t0 := time.Now()
				fi, err := e.a.c.Upload(ctx, e.id, upFile, 0o600, data.reader())
				if err != nil {
					return 0, err
				}
				d := time.Since(t0)
				if fi.Size != data.n {
					return 0, fmt.Errorf("uploaded file has %d bytes, want %d", fi.Size, data.n)
				}
				out, err := e.output(ctx, "sha256sum", throughputUpload)
				if err != nil {
					return 0, err
				}
				if err := e.a.c.RemoveFile(ctx, e.id, upFile, false); err != nil {
					return 0, err
				}
				sum, err := parseSum(out)
				if err == nil && sum != data.sum {
					err = fmt.Errorf("sha256sum of the uploaded file is %s, want %s", sum, data.sum)
				}
				return d, err
			}},
		{row: row(DirDownload, "client.Download of "+throughputFile+" (N bytes) → body read to the end and hashed here"),
			run: func(ctx context.Context) (time.Duration, error) {
				hc := newHashCounter()
				t0 := time.Now()
				body, _, err := e.a.c.Download(ctx, e.id, file)
				if err != nil {
					return 0, err
				}
				_, err = io.Copy(hc, body)
				body.Close()
				if err != nil {
					return 0, err
				}
				d := time.Since(t0)
				return d, hc.check(data.n, data.sum)
			}},
	}, nil
}

// attachTo runs a command and writes its stdout to w; it fails unless the
// command exits with 0.
func (e *execAirlock) attachTo(ctx context.Context, req apiv1.CreateCommandRequest, w io.Writer) error {
	cs, err := e.a.c.CreateCommand(ctx, e.id, req)
	if err != nil {
		return err
	}
	return e.attachSession(ctx, cs, w)
}

func (e *execAirlock) attachSession(ctx context.Context, cs apiv1.CommandSession, w io.Writer) error {
	return attachUntilExit(ctx, e.a.c, cs, w)
}

// attachUntilExit attaches to a command session, copies its stdout to w and
// returns when it exits: nil for exit code 0, an error with the start of
// its stderr otherwise.
func attachUntilExit(ctx context.Context, c *client.Client, cs apiv1.CommandSession, w io.Writer) error {
	st, err := c.Attach(ctx, cs.AttachURL, cs.AttachmentToken)
	if err != nil {
		return err
	}
	defer st.Close()
	var stderr strings.Builder
	for {
		ev, err := st.Next()
		if errors.Is(err, io.EOF) {
			return errors.New("the attach stream ended without an exit event")
		}
		if err != nil {
			return err
		}
		switch ev.Kind {
		case apiv1.EventStdout:
			if _, err := w.Write(ev.Data); err != nil {
				return err
			}
		case apiv1.EventStderr:
			if stderr.Len() < 4096 {
				stderr.Write(ev.Data)
			}
		case apiv1.EventError:
			msg := "no reason given"
			if ev.Err != nil {
				msg = ev.Err.Code + ": " + ev.Err.Message
			}
			return fmt.Errorf("command failed: %s", msg)
		case apiv1.EventExit:
			if ev.ExitCode != 0 || ev.Signal != "" {
				return fmt.Errorf("exited with code %d (signal %q): %s", ev.ExitCode, ev.Signal, strings.TrimSpace(stderr.String()))
			}
			return nil
		}
	}
}

// output runs a command (untimed checks) and returns its stdout.
func (e *execAirlock) output(ctx context.Context, args ...string) (string, error) {
	var out strings.Builder
	err := e.attachTo(ctx, apiv1.CreateCommandRequest{Args: args}, &limitedWriter{w: &out, left: 64 << 10})
	return out.String(), err
}

// stdinRun runs sha256sum with data on its stdin, sent through the data
// plane's stdin route while the attach stream is read, and returns what it
// printed. The command is a background one, started by its creation: a
// first attach and a stdin POST that race to start the process can make
// the POST fail with process_not_found.
func (e *execAirlock) stdinRun(ctx context.Context, data payload) (string, error) {
	cs, err := e.a.c.CreateCommand(ctx, e.id, apiv1.CreateCommandRequest{Args: []string{"sha256sum"}, Stdin: true, Background: true})
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sent := make(chan error, 1)
	go func() { sent <- e.postStdin(ctx, cs, data.reader()) }()
	var out strings.Builder
	aerr := e.attachSession(ctx, cs, &limitedWriter{w: &out, left: 64 << 10})
	if aerr != nil {
		cancel()
	}
	serr := <-sent
	if aerr != nil {
		return "", errors.Join(aerr, serr)
	}
	if serr != nil {
		return "", fmt.Errorf("stdin: %w", serr)
	}
	return out.String(), nil
}

// postStdin streams body to POST …/stdin?close=1 of the session's process.
func (e *execAirlock) postStdin(ctx context.Context, cs apiv1.CommandSession, body io.Reader) error {
	ref, ok := strings.CutSuffix(cs.AttachURL, "/attach")
	if !ok {
		return fmt.Errorf("attach URL %q does not end in /attach", cs.AttachURL)
	}
	u := ref + "/stdin?close=1"
	if strings.HasPrefix(u, "/") {
		u = strings.TrimSuffix(e.a.c.BaseURL(), "/") + u
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, io.NopCloser(body))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+cs.AttachmentToken)
	req.Header.Set("Content-Type", "application/octet-stream")
	resp, err := e.httpClient().Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return fmt.Errorf("POST %s: %s: %s", u, resp.Status, strings.TrimSpace(string(msg)))
	}
	return nil
}

// httpClient is the plain HTTP client for the stdin route (the Go client
// has no method for it yet).
func (e *execAirlock) httpClient() *http.Client {
	if e.http == nil {
		e.http = &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}
	}
	return e.http
}

// limitedWriter keeps the first left bytes and drops the rest.
type limitedWriter struct {
	w    io.Writer
	left int
}

func (l *limitedWriter) Write(b []byte) (int, error) {
	if l.left > 0 {
		k := min(len(b), l.left)
		l.left -= k
		if _, err := l.w.Write(b[:k]); err != nil {
			return 0, err
		}
	}
	return len(b), nil
}
