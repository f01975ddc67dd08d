package noderoute

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/store"
)

type nodeURLs map[model.NodeID]string

func (n nodeURLs) GetNodeRecord(_ context.Context, id model.NodeID) (model.Node, error) {
	u, ok := n[id]
	if !ok {
		return model.Node{}, store.ErrNotFound
	}
	return model.Node{ID: id, AdvertiseURL: u, State: model.NodeActive}, nil
}

// TestForwardAnswerHeaders: Forward returns what the serving node's
// answer headers say and removes them from the answer it relays; its own
// error is node_unreachable; the hop guard's answer names its code.
func TestForwardAnswerHeaders(t *testing.T) {
	t.Parallel()
	node := model.NewNodeID()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !Forwarded(r) {
			t.Errorf("the node got a request without %s", HeaderForwardedBy)
		}
		switch r.URL.Path {
		case "/created":
			w.Header().Set(HeaderCreatedID, "prj_x")
			w.WriteHeader(http.StatusCreated)
		case "/nothere":
			WriteNotHere(w, model.NewSandboxID(), model.NewNodeID())
		default:
			w.Header().Set(HeaderErrorCode, "some_code")
			w.WriteHeader(http.StatusConflict)
		}
		_, _ = io.WriteString(w, "{}\n")
	}))
	t.Cleanup(srv.Close)
	dead := model.NewNodeID()
	rt := New(model.NewNodeID(), nodeURLs{node: srv.URL}, nil, slog.New(slog.DiscardHandler))
	for _, tc := range []struct {
		node   model.NodeID
		path   string
		status int
		want   Answer
	}{
		{node, "/created", http.StatusCreated, Answer{CreatedID: "prj_x"}},
		{node, "/refused", http.StatusConflict, Answer{ErrorCode: "some_code"}},
		{node, "/nothere", http.StatusServiceUnavailable, Answer{ErrorCode: apiv1.CodeUnavailable}},
		{dead, "/any", http.StatusServiceUnavailable, Answer{ErrorCode: apiv1.CodeNodeUnreachable}},
	} {
		w := httptest.NewRecorder()
		got := rt.Forward(w, httptest.NewRequest("POST", tc.path, nil), tc.node, nil)
		if got != tc.want || w.Code != tc.status {
			t.Errorf("%s: %d %+v, want %d %+v", tc.path, w.Code, got, tc.status, tc.want)
		}
		for _, h := range []string{HeaderErrorCode, HeaderCreatedID} {
			if v, ok := w.Header()[h]; ok {
				t.Errorf("%s: the client got %s: %q", tc.path, h, v)
			}
		}
	}
}
