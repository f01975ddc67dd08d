package api

import (
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/model"
)

// A retried operation shows when it is attempted again; a finished one, or
// one never retried, does not.
func TestOperationOutNotBefore(t *testing.T) {
	at := time.Date(2026, 11, 30, 12, 0, 0, 0, time.FixedZone("x", 3600))
	done := at.Add(time.Minute)
	for _, tc := range []struct {
		name string
		op   model.Operation
		want *time.Time
	}{
		{"never retried", model.Operation{State: model.OpRunning}, nil},
		{"waiting", model.Operation{State: model.OpRunning, NotBefore: at}, &at},
		{"finished", model.Operation{State: model.OpSucceeded, NotBefore: at, FinishedAt: &done}, nil},
	} {
		got := operationOut(tc.op).NotBefore
		switch {
		case tc.want == nil && got != nil:
			t.Errorf("%s: not_before %v, want none", tc.name, got)
		case tc.want != nil && (got == nil || !got.Equal(*tc.want) || got.Location() != time.UTC):
			t.Errorf("%s: not_before %v, want %v in UTC", tc.name, got, tc.want)
		}
	}
}
