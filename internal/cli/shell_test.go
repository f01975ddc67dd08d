package cli

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestShellUsage(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"no sandbox", []string{"shell"}, "missing SANDBOX"},
		{"bad sandbox", []string{"shell", "nope"}, "nope"},
		{"empty command", []string{"shell", "sbx_" + strings.Repeat("a", 26), "--"}, "missing the command"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := Run(context.Background(), Env{Stdout: &stdout, Stderr: &stderr}, tt.args)
			if code != exitUsage || !strings.Contains(stderr.String(), tt.want) {
				t.Fatalf("exit %d, stderr %q; want %d and %q", code, stderr.String(), exitUsage, tt.want)
			}
		})
	}
}

// A Read of our stdin blocked on nobody typing ends when the shell ends,
// and the descriptor gets its blocking mode back.
func TestInterruptibleInput(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	in, stop, ok := interruptibleInput(r)
	if !ok {
		t.Fatal("a pipe should be interruptible")
	}
	if _, err := w.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 8)
	if n, err := in.Read(buf); err != nil || string(buf[:n]) != "x" {
		t.Fatalf("read %q, %v", buf[:n], err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := in.Read(buf)
		done <- err
	}()
	time.Sleep(50 * time.Millisecond)
	stop()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("the blocked read returned no error")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("stop did not end the blocked read")
	}
	// Not r.Fd(): it would make the descriptor blocking itself.
	sc, err := r.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var flags int
	if cerr := sc.Control(func(fd uintptr) { flags, err = unix.FcntlInt(fd, unix.F_GETFL, 0) }); cerr != nil {
		t.Fatal(cerr)
	}
	if err != nil || flags&unix.O_NONBLOCK != 0 {
		t.Fatalf("flags %#x, %v: the descriptor was left non-blocking", flags, err)
	}
	if _, _, ok := interruptibleInput(strings.NewReader("")); ok {
		t.Fatal("a strings.Reader cannot be interrupted")
	}
}
