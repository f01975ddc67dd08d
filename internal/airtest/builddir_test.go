package airtest

import (
	"fmt"
	"os"
	"testing"

	"github.com/airlockdev/airlock/internal/procfs"
)

func TestProcessLives(t *testing.T) {
	self, ok := procfs.ReadStat(os.Getpid())
	if !ok {
		t.Fatal("read own stat")
	}
	tests := []struct {
		name string
		want bool
	}{
		{fmt.Sprintf("%d-%d-123", os.Getpid(), self.StartTime), true},
		{fmt.Sprintf("%d-%d-123", os.Getpid(), self.StartTime+1), false}, // the pid was reused
		{fmt.Sprintf("%d-1-123", 1<<22+1), false},                        // no such process
		{"something-else", true},                                         // not ours: kept
		{"x-1-2", true},
	}
	for _, tt := range tests {
		if got := processLives(tt.name); got != tt.want {
			t.Errorf("processLives(%q) = %v, want %v", tt.name, got, tt.want)
		}
	}
}
