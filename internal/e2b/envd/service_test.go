package envd

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"connectrpc.com/connect"

	"github.com/airlockdev/airlock/internal/e2b/envd/processpb"
	"github.com/airlockdev/airlock/internal/e2b/envd/processpb/processpbconnect"
)

// Without a target in the context (the gateway did not authorize the
// request) every method fails with unauthenticated, streams included.
func TestNoTarget(t *testing.T) {
	path, h := NewProcessHandler(slog.Default())
	if path != "/process.Process/" {
		t.Fatalf("path %q", path)
	}
	mux := http.NewServeMux()
	mux.Handle(path, h)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	ctx := context.Background()
	sel := &processpb.ProcessSelector{Selector: &processpb.ProcessSelector_Pid{Pid: 1}}
	for _, opts := range [][]connect.ClientOption{{connect.WithProtoJSON()}, nil} { // JSON, binary
		pc := processpbconnect.NewProcessClient(srv.Client(), srv.URL, opts...)
		calls := map[string]func() error{
			"List": func() error {
				_, err := pc.List(ctx, connect.NewRequest(&processpb.ListRequest{}))
				return err
			},
			"SendSignal": func() error {
				_, err := pc.SendSignal(ctx, connect.NewRequest(&processpb.SendSignalRequest{Process: sel, Signal: processpb.Signal_SIGNAL_SIGKILL}))
				return err
			},
			"Start": func() error {
				st, err := pc.Start(ctx, connect.NewRequest(&processpb.StartRequest{Process: &processpb.ProcessConfig{Cmd: "/bin/sh"}}))
				if err != nil {
					return err
				}
				defer st.Close()
				for st.Receive() {
					t.Error("Start without a target sent an event")
				}
				return st.Err()
			},
			"Connect": func() error {
				st, err := pc.Connect(ctx, connect.NewRequest(&processpb.ConnectRequest{Process: sel}))
				if err != nil {
					return err
				}
				defer st.Close()
				for st.Receive() {
					t.Error("Connect without a target sent an event")
				}
				return st.Err()
			},
		}
		for name, call := range calls {
			if err := call(); connect.CodeOf(err) != connect.CodeUnauthenticated {
				t.Errorf("%s: %v, want unauthenticated", name, err)
			}
		}
	}
}
