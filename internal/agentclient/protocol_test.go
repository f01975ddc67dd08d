package agentclient_test

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/airlockdev/airlock/internal/agent"
	"github.com/airlockdev/airlock/internal/agentproto"
)

type netConn = net.Conn

func dialUnix(ctx context.Context, path string) (net.Conn, error) {
	var d net.Dialer
	return d.DialContext(ctx, "unix", path)
}

func osWriteFile(path string) error { return os.WriteFile(path, nil, 0o644) }

// rawClient talks to the agent's handler without agentclient, to check the
// wire format and the answers to requests agentclient never sends.
type rawClient struct{ url string }

type rawResponse struct {
	status  int
	body    string
	errCode string
}

func agentHandlerClient(t *testing.T, srv *agent.Server) rawClient {
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(ts.Close)
	return rawClient{url: ts.URL}
}

func (c rawClient) do(t *testing.T, method, path, body string) rawResponse {
	t.Helper()
	req, err := http.NewRequest(method, c.url+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	r := rawResponse{status: resp.StatusCode, body: string(data)}
	if resp.StatusCode >= 300 {
		var e agentproto.Error
		if err := json.Unmarshal(data, &e); err != nil || e.Message == "" {
			t.Fatalf("%s %s: error body %q is not an agentproto.Error", method, path, data)
		}
		r.errCode = e.Code
		if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
			t.Fatalf("%s %s: error Content-Type %q", method, path, ct)
		}
	}
	return r
}

func (c rawClient) post(t *testing.T, path, body string) rawResponse {
	return c.do(t, http.MethodPost, path, body)
}

func TestProtocolErrors(t *testing.T) {
	srv := newServer(t, agent.Options{})
	c := agentHandlerClient(t, srv)
	id := newID()
	if r := c.post(t, "/v1/processes", `{"id":"`+id+`","args":["sleep","100"]}`); r.status != 201 {
		t.Fatalf("start: %d %s", r.status, r.body)
	}
	big := `{"id":"` + newID() + `","args":["` + strings.Repeat("a", 2<<20) + `"]}`
	tests := []struct {
		name, method, path, body string
		status                   int
		code                     string
	}{
		{"unknown field", "POST", "/v1/processes", `{"id":"` + newID() + `","args":["true"],"user":"nobody"}`, 400, agentproto.CodeInvalidRequest},
		{"malformed JSON", "POST", "/v1/processes", `{"id":`, 400, agentproto.CodeInvalidRequest},
		{"trailing data", "POST", "/v1/processes", `{"id":"` + newID() + `","args":["true"]} {}`, 400, agentproto.CodeInvalidRequest},
		{"wrong type", "POST", "/v1/processes", `{"id":"` + newID() + `","args":"true"}`, 400, agentproto.CodeInvalidRequest},
		{"body too large", "POST", "/v1/processes", big, 413, agentproto.CodeInvalidRequest},
		{"unknown endpoint", "GET", "/v1/nothing", "", 404, agentproto.CodeNoRoute},
		{"wrong method", "DELETE", "/v1/processes/" + id, "", 404, agentproto.CodeNoRoute},
		{"bad id in path", "GET", "/v1/processes/xyz", "", 400, agentproto.CodeInvalidRequest},
		{"unknown id", "GET", "/v1/processes/" + newID(), "", 404, agentproto.CodeNotFound},
		{"bad after", "GET", "/v1/processes/" + id + "/output?after=-1", "", 400, agentproto.CodeInvalidRequest},
		{"bad after text", "GET", "/v1/processes/" + id + "/output?after=abc", "", 400, agentproto.CodeInvalidRequest},
		{"signal unknown field", "POST", "/v1/processes/" + id + "/signal", `{"signal":"TERM","x":1}`, 400, agentproto.CodeInvalidRequest},
		{"signal bad name", "POST", "/v1/processes/" + id + "/signal", `{"signal":"BOOM"}`, 400, agentproto.CodeInvalidRequest},
		{"signal unknown id", "POST", "/v1/processes/" + newID() + "/signal", `{"signal":"TERM"}`, 404, agentproto.CodeNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := c.do(t, tt.method, tt.path, tt.body)
			if r.status != tt.status || r.errCode != tt.code {
				t.Fatalf("%s %s = %d %q (%s); want %d %q", tt.method, tt.path, r.status, r.errCode, r.body, tt.status, tt.code)
			}
		})
	}
	if r := c.post(t, "/v1/processes/"+id+"/signal", `{"signal":"KILL"}`); r.status != 204 {
		t.Fatalf("signal: %d %s", r.status, r.body)
	}
}

// The output stream is NDJSON with base64 data, one event per line.
func TestOutputWireFormat(t *testing.T) {
	srv := newServer(t, agent.Options{})
	c := agentHandlerClient(t, srv)
	id := newID()
	if r := c.post(t, "/v1/processes", `{"id":"`+id+`","args":["/bin/sh","-c","printf hi; exit 2"]}`); r.status != 201 {
		t.Fatalf("start: %d %s", r.status, r.body)
	}
	resp, err := http.Get(c.url + "/v1/processes/" + id + "/output")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "application/x-ndjson" {
		t.Fatalf("Content-Type %q", ct)
	}
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"seq":1,"type":"stdout","data":"aGk="}` + "\n" + `{"seq":2,"type":"exit","exit_code":2}` + "\n"
	if string(data) != want {
		t.Fatalf("stream = %q, want %q", data, want)
	}
}
