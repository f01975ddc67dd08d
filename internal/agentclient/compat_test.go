package agentclient_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/airlockdev/airlock/internal/agentclient"
	"github.com/airlockdev/airlock/internal/agentproto"
)

// recordedAgent serves the recorded responses of an older agent over
// HTTP/2 with prior knowledge, as a real agent does; info overrides the
// recorded /v1/info body.
func recordedAgent(t *testing.T, info string) agentclient.Dialer {
	t.Helper()
	read := func(name string) []byte {
		b, err := os.ReadFile("testdata/agent-v1/" + name)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	if info == "" {
		info = string(read("info.json"))
	}
	start, output := read("start.json"), read("output.ndjson")
	mux := http.NewServeMux()
	reply := func(status int, ct string, body []byte) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", ct)
			w.WriteHeader(status)
			w.Write(body)
		}
	}
	mux.HandleFunc("GET /v1/info", reply(200, "application/json", []byte(info)))
	mux.HandleFunc("POST /v1/processes", func(w http.ResponseWriter, r *http.Request) {
		// A protocol 1 agent refuses fields it does not know.
		body, _ := io.ReadAll(r.Body)
		if strings.Contains(string(body), `"stdin"`) || strings.Contains(string(body), `"pty"`) {
			reply(400, "application/json", []byte(`{"code":"invalid_request","message":"unknown field"}`))(w, r)
			return
		}
		reply(201, "application/json", start)(w, r)
	})
	mux.HandleFunc("GET /v1/processes/{id}/output", reply(200, "application/x-ndjson", output))
	mux.HandleFunc("/", reply(404, "application/json", []byte(`{"code":"no_route","message":"no endpoint"}`)))
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

// The host drives a protocol 1 agent: NDJSON output, no new features.
func TestOlderAgentFixture(t *testing.T) {
	c := newClient(t, recordedAgent(t, ""))
	ctx := ctxT(t)
	res, err := c.Run(ctx, agentproto.StartRequest{ID: "proc_aaaaaaaaaaaaaaaaaaaaaaaaaa", Args: []string{"sh", "-c", "echo one; echo two >&2; exit 3"}})
	if err != nil {
		t.Fatal(err)
	}
	if string(res.Stdout) != "one\n" || string(res.Stderr) != "two\n" || res.ExitCode != 3 {
		t.Fatalf("Run = %q %q %d", res.Stdout, res.Stderr, res.ExitCode)
	}
	// What protocol 1 lacks is refused on the host, with a clear error.
	_, err = c.Start(ctx, agentproto.StartRequest{ID: "proc_bbbbbbbbbbbbbbbbbbbbbbbbbb", Args: []string{"cat"}, Stdin: true})
	if !errors.Is(err, agentclient.ErrUnsupported) || !strings.Contains(err.Error(), `"stdin"`) {
		t.Fatalf("Start with stdin on a protocol 1 agent: %v", err)
	}
	if err := c.Stdin(ctx, "proc_aaaaaaaaaaaaaaaaaaaaaaaaaa", strings.NewReader("x"), true); !errors.Is(err, agentclient.ErrUnsupported) {
		t.Fatalf("Stdin on a protocol 1 agent: %v", err)
	}
}

// Agents outside the supported range are refused on connect.
func TestUnsupportedProtocol(t *testing.T) {
	for _, proto := range []int{0, agentproto.ProtocolVersion + 1, 99} {
		info := `{"agent_version":"vX","protocol":` + strconv.Itoa(proto) + `,"pid":1,"started_at":"2026-11-30T00:00:00Z"}`
		c := newClient(t, recordedAgent(t, info))
		_, err := c.List(ctxT(t))
		var pe *agentclient.ProtocolError
		if !errors.As(err, &pe) || pe.Protocol != proto || !strings.Contains(err.Error(), "supports protocols") {
			t.Fatalf("protocol %d: %v", proto, err)
		}
	}
}
