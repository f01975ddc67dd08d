package environment

import "testing"

// TestHostPids: what each environment's host lets a sandbox of a guest
// pids limit hold, the one rule the runtimes apply and admission charges.
func TestHostPids(t *testing.T) {
	for _, tt := range []struct {
		name  Name
		guest int
		want  int
	}{
		{NameRunc, 1024, 1088},
		{NameCrun, 1024, 1088},
		{NameRunc, 128, 192},
		{NameRunsc, 1024, 4352},
		{NameRunsc, 128, 768},
		{NameQEMU, 1024, QEMUHostPids},
		{NameQEMU, 64, QEMUHostPids},
		// Not known to this binary: the most any known one allows.
		{"", 1024, 4352},
		{"future", 64, 512},
	} {
		if got := HostPids(tt.name, tt.guest); got != tt.want {
			t.Errorf("HostPids(%q, %d) = %d, want %d", tt.name, tt.guest, got, tt.want)
		}
	}
}
