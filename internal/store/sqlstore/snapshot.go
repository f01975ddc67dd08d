package sqlstore

import (
	"encoding/json"
	"fmt"

	"github.com/airlockdev/airlock/internal/model"
)

// storedSnapshot is the JSON of the sandboxes.snapshot column.
type storedSnapshot struct {
	Kind        string `json:"kind"`
	Environment string `json:"environment,omitempty"`
	Format      string `json:"format"`
	Location    string `json:"location"`
	SizeBytes   int64  `json:"size_bytes"`
	CreatedAt   int64  `json:"created_at"` // unix microseconds
}

func encodeSnapshot(s *model.Snapshot) (any, error) {
	if s == nil {
		return nil, nil
	}
	if _, err := model.ParseSnapshotKind(string(s.Kind)); err != nil {
		return nil, err
	}
	b, err := json.Marshal(storedSnapshot{
		Kind: string(s.Kind), Environment: string(s.Environment), Format: s.Format,
		Location: s.Location, SizeBytes: s.SizeBytes, CreatedAt: micro(s.CreatedAt),
	})
	if err != nil {
		return nil, fmt.Errorf("encode snapshot: %w", err)
	}
	return string(b), nil
}

func decodeSnapshot(text string) (*model.Snapshot, error) {
	var st storedSnapshot
	if err := json.Unmarshal([]byte(text), &st); err != nil {
		return nil, fmt.Errorf("snapshot: %w", err)
	}
	kind, err := model.ParseSnapshotKind(st.Kind)
	if err != nil {
		return nil, fmt.Errorf("snapshot: %w", err)
	}
	out := &model.Snapshot{Kind: kind, Format: st.Format, Location: st.Location, SizeBytes: st.SizeBytes, CreatedAt: fromMicro(st.CreatedAt)}
	if st.Environment != "" {
		if out.Environment, err = model.ParseEnvironmentRef(st.Environment); err != nil {
			return nil, fmt.Errorf("snapshot: %w", err)
		}
	}
	return out, nil
}
