package agentclient_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/airlockdev/airlock/internal/agentclient"
	"github.com/airlockdev/airlock/internal/agentproto"
)

// hostileAgent serves handler (after a valid /v1/info, unless handler
// serves that too) over HTTP/2 with prior knowledge, as a guest that
// replaced its agent would.
func hostileAgent(t *testing.T, handler http.HandlerFunc) agentclient.Dialer {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/info", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"agent_version":"hostile","protocol":%d,"features":["frames","gap","stdin","user","timeout","wait","hold","logs"],"pid":1,"started_at":"2026-11-30T00:00:00Z"}`, agentproto.ProtocolVersion)
	})
	mux.HandleFunc("/", handler)
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	srv := &http.Server{Handler: mux, Protocols: &p}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "tcp", ln.Addr().String())
	}
}

// jsonWithString writes {"<field>":"xxx…"} with n x's: valid JSON of about
// n bytes, written as it goes.
func jsonWithString(w io.Writer, field string, n int) {
	fmt.Fprintf(w, `{%q:"`, field)
	chunk := []byte(strings.Repeat("x", 64<<10))
	for n > 0 {
		c := min(n, len(chunk))
		if _, err := w.Write(chunk[:c]); err != nil {
			return
		}
		n -= c
	}
	io.WriteString(w, `"}`)
}

// Every kind of response the host reads from an agent is capped: a guest
// that sends more gets a clear error (ErrResponseTooLarge), not a host
// that reads without bound.
func TestHostileAgentResponsesAreCapped(t *testing.T) {
	const id = "proc_aaaaaaaaaaaaaaaaaaaaaaaaaa"
	big := func(field string, n int) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			jsonWithString(w, field, n)
		}
	}
	for _, tc := range []struct {
		name    string
		handler http.HandlerFunc
		call    func(ctx context.Context, c *agentclient.Client) error
	}{
		{"status", big("id", 2<<20), func(ctx context.Context, c *agentclient.Client) error {
			_, err := c.Status(ctx, id)
			return err
		}},
		{"process list", big("processes_padding", 17<<20), func(ctx context.Context, c *agentclient.Client) error {
			_, err := c.List(ctx)
			return err
		}},
		{"file stat", big("name", 2<<20), func(ctx context.Context, c *agentclient.Client) error {
			_, err := c.Stat(ctx, "/x")
			return err
		}},
		{"directory list", big("path", 17<<20), func(ctx context.Context, c *agentclient.Client) error {
			_, err := c.ListDir(ctx, "/")
			return err
		}},
		{"write result", big("name", 2<<20), func(ctx context.Context, c *agentclient.Client) error {
			_, err := c.WriteFile(ctx, "/x", 0o644, strings.NewReader("data"))
			return err
		}},
		{"tar result", big("padding", 2<<20), func(ctx context.Context, c *agentclient.Client) error {
			_, err := c.TarIn(ctx, "/x", strings.NewReader(""))
			return err
		}},
		{"logs", func(w http.ResponseWriter, r *http.Request) {
			jsonWithString(w, "log", 5<<20)
		}, func(ctx context.Context, c *agentclient.Client) error {
			_, err := c.Logs(ctx)
			return err
		}},
		{"watch event", func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, `{"type":"ready"}`+"\n")
			jsonWithString(w, "path", 128<<10)
			io.WriteString(w, "\n")
		}, func(ctx context.Context, c *agentclient.Client) error {
			ws, err := c.Watch(ctx, "/")
			if err != nil {
				return err
			}
			defer ws.Close()
			_, err = ws.Next()
			return err
		}},
		{"run output", func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodPost {
				w.WriteHeader(http.StatusCreated)
				fmt.Fprintf(w, `{"id":%q,"running":true}`, id)
				return
			}
			w.Header().Set("Content-Type", agentproto.FramesMediaType)
			data := make([]byte, 64<<10)
			var buf []byte
			for seq := uint64(1); seq <= 2000; seq++ { // 125 MiB
				var err error
				buf, err = agentproto.AppendFrame(buf[:0], &agentproto.Event{Seq: seq, Type: agentproto.EventStdout, Data: data})
				if err != nil {
					panic(err)
				}
				if _, err := w.Write(buf); err != nil {
					return
				}
			}
		}, func(ctx context.Context, c *agentclient.Client) error {
			_, err := c.Run(ctx, agentproto.StartRequest{ID: id, Args: []string{"yes"}})
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newClient(t, hostileAgent(t, tc.handler))
			err := tc.call(ctxT(t), c)
			if !errors.Is(err, agentclient.ErrResponseTooLarge) {
				t.Fatalf("err = %v, want ErrResponseTooLarge", err)
			}
		})
	}
}

// An oversized handshake is refused before anything else.
func TestHostileAgentInfoIsCapped(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/info", func(w http.ResponseWriter, r *http.Request) {
		jsonWithString(w, "agent_version", 128<<10)
	})
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	srv := &http.Server{Handler: mux, Protocols: &p}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	c := newClient(t, func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "tcp", ln.Addr().String())
	})
	if _, err := c.Info(ctxT(t)); !errors.Is(err, agentclient.ErrResponseTooLarge) {
		t.Fatalf("Info = %v, want ErrResponseTooLarge", err)
	}
}

// An error response's message is cut to a size fit for logs and API
// errors; huge headers are refused.
func TestHostileAgentErrorsAndHeadersAreCapped(t *testing.T) {
	c := newClient(t, hostileAgent(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/processes/headers" {
			w.Header().Set("X-Padding", strings.Repeat("h", 256<<10))
			w.WriteHeader(http.StatusOK)
			return
		}
		w.WriteHeader(http.StatusNotFound)
		fmt.Fprintf(w, `{"code":"not_found","message":%q}`, strings.Repeat("m", 60<<10))
	}))
	_, err := c.Status(ctxT(t), "proc_aaaaaaaaaaaaaaaaaaaaaaaaaa")
	var ae *agentclient.Error
	if !errors.As(err, &ae) || ae.Code != agentproto.CodeNotFound {
		t.Fatalf("Status = %v, want a not_found *Error", err)
	}
	if len(ae.Message) > 2<<10 || !strings.Contains(ae.Message, "more bytes") {
		t.Fatalf("error message of %d bytes kept: %.80q…", len(ae.Message), ae.Message)
	}
	if _, err := c.Status(ctxT(t), "headers"); err == nil {
		t.Fatal("a response with 256 KiB of headers was accepted")
	}
}

// A frame header that claims a big payload makes the reader allocate only
// what arrives; control frames are small.
func TestHostileAgentFrames(t *testing.T) {
	hdr := func(kind byte, seq uint64, n uint32) []byte {
		b := make([]byte, 13)
		b[0] = kind
		binary.BigEndian.PutUint64(b[1:9], seq)
		binary.BigEndian.PutUint32(b[9:13], n)
		return b
	}
	const id = "proc_aaaaaaaaaaaaaaaaaaaaaaaaaa"
	for _, tc := range []struct {
		name   string
		stream []byte
	}{
		// Kind 1 is stdout, 3 exit (agentproto/frame.go).
		{"stdout frame cut short", append(hdr(1, 1, agentproto.MaxFramePayload), "only this"...)},
		{"huge exit frame", append(hdr(3, 1, 1<<20), make([]byte, 1<<20)...)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newClient(t, hostileAgent(t, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", agentproto.FramesMediaType)
				w.Write(tc.stream)
			}))
			s, err := c.Output(ctxT(t), id, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if ev, err := s.Next(); err == nil || errors.Is(err, io.EOF) {
				t.Fatalf("Next = %+v, %v; want an error", ev, err)
			}
		})
	}
}
