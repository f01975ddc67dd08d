package server

import (
	"context"
	"log/slog"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/store/sqlite"
)

// A node reports its templates when it registers, not a heartbeat later:
// registering clears the list, and placement passes over a node that holds
// no template.
func TestRegisterReportsTemplates(t *testing.T) {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "airlock.db"), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	digest := model.TemplateDigest("sha256:" + string(slices.Repeat([]byte("ab"), 32)))
	if err := st.PutTemplate(ctx, model.Template{Digest: digest, CreatedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	node := model.Node{ID: model.NewNodeID(), Incarnation: model.NewIncarnation(), Role: model.RoleNode,
		AdvertiseURL: "http://10.0.0.1:7070", Slots: 4}
	m := &membership{st: st, node: node, interval: time.Hour, deadAfter: 3 * time.Hour, log: slog.New(slog.DiscardHandler),
		templates: func() ([]model.TemplateDigest, error) { return []model.TemplateDigest{digest}, nil }}
	if err := m.register(ctx); err != nil {
		t.Fatal(err)
	}
	holders, err := st.NodesWithTemplate(ctx, digest)
	if err != nil || !slices.Equal(holders, []model.NodeID{node.ID}) {
		t.Fatalf("holders of the template right after registering: %v (%v)", holders, err)
	}
}
