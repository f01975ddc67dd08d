package staticelf

import (
	"errors"
	"os"
	"os/exec"
	"testing"
)

func TestCheck(t *testing.T) {
	for _, c := range []struct {
		path string
		want error
	}{
		{"/bin/busybox", nil}, // busybox-static
		{"/bin/ls", ErrDynamic},
		{"/etc/passwd", ErrNotELF},
	} {
		data, err := os.ReadFile(c.path)
		if err != nil {
			t.Logf("%s: %v", c.path, err)
			continue
		}
		if err := Check(data); !errors.Is(err, c.want) && (c.want != nil || err != nil) {
			t.Errorf("Check(%s) = %v, want %v", c.path, err, c.want)
		}
	}
	if _, err := exec.LookPath("busybox"); err != nil {
		t.Log("no busybox here: the static case was not checked")
	}
}

func FuzzCheck(f *testing.F) {
	if data, err := os.ReadFile("/bin/true"); err == nil {
		f.Add(data[:min(len(data), 4096)])
	}
	f.Add([]byte("\x7fELF"))
	f.Fuzz(func(t *testing.T, data []byte) {
		_ = Check(data) // must not panic
	})
}
