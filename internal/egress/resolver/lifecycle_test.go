package resolver

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/airlockdev/airlock/internal/egress"
)

func TestInflight(t *testing.T) {
	var f inflight
	f.init(2)
	sb1, sb2 := &egress.Sandbox{}, &egress.Sandbox{}
	ctx := context.Background()
	r1, err := f.acquire(ctx, sb1)
	if err != nil {
		t.Fatal(err)
	}
	r2, err := f.acquire(ctx, sb1)
	if err != nil {
		t.Fatal(err)
	}
	// sb1 is full: a third query waits until its deadline.
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, err := f.acquire(short, sb1); !errors.Is(err, errBusy) {
		t.Fatalf("third acquire: %v", err)
	}
	// Another sandbox is not affected.
	r3, err := f.acquire(ctx, sb2)
	if err != nil {
		t.Fatal(err)
	}
	// A waiter gets the slot a release frees.
	got := make(chan error, 1)
	go func() {
		rel, err := f.acquire(ctx, sb1)
		if err == nil {
			rel()
		}
		got <- err
	}()
	time.Sleep(20 * time.Millisecond)
	r1()
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	r2()
	r3()
	f.mu.Lock()
	n := len(f.by)
	f.mu.Unlock()
	if n != 0 {
		t.Fatalf("%d semaphores left after every release", n)
	}
}

// TestServeStops checks that Serve returns once its context ends, releases both sockets and
// answers no more.
func TestServeStops(t *testing.T) {
	up := newFakeUpstream(t, zone)
	reg := egress.NewRegistry(egress.RegistryConfig{})
	r, err := New(Config{Listen: "127.0.0.1:0", Upstream: up.addr, Registry: reg, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Serve(ctx) }()
	m := new(dns.Msg)
	m.SetQuestion("ok.example.", dns.TypeA)
	if in, err := exchange(stranger, "tcp", r.Addr().String(), m); err != nil || in.Rcode != dns.RcodeRefused {
		t.Fatalf("before stop: %v %v", in, err)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Serve: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return")
	}
	if err := r.Serve(context.Background()); err == nil {
		t.Error("second Serve succeeded")
	}
	// Both protocols' port is free again.
	r2, err := New(Config{Listen: r.Addr().String(), Upstream: up.addr, Registry: reg})
	if err != nil {
		t.Fatalf("port not released: %v", err)
	}
	r2.Close()
}

func TestUpstreamFromResolvConf(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		body, want string
	}{
		{"# comment\nsearch example\nnameserver 192.0.2.53\nnameserver 192.0.2.54\n", "192.0.2.53:53"},
		{"nameserver 2001:db8::53\n", "[2001:db8::53]:53"},
		{"search example\n", ""},
	} {
		p := filepath.Join(dir, "resolv.conf")
		if err := os.WriteFile(p, []byte(tc.body), 0o600); err != nil {
			t.Fatal(err)
		}
		got, err := UpstreamFromResolvConf(p)
		if (err != nil) != (tc.want == "") || got != tc.want {
			t.Errorf("%q: %q %v, want %q", tc.body, got, err, tc.want)
		}
	}
	if _, err := UpstreamFromResolvConf(filepath.Join(dir, "missing")); err == nil {
		t.Error("missing file accepted")
	}
}
