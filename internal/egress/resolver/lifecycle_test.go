package resolver

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/airlockdev/airlock/internal/egress"
	"github.com/airlockdev/airlock/internal/egress/policy"
	"github.com/airlockdev/airlock/internal/model"
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
	spec, err := policy.ParseSpec([]byte(`{"default":"none"}`))
	if err != nil {
		t.Fatal(err)
	}
	p, err := policy.Compile(spec, nil, policy.Public)
	if err != nil {
		t.Fatal(err)
	}
	reg.Add(model.SandboxID("sbx_serve_stops"), guest, p)
	r, err := New(Config{Listen: "127.0.0.1:0", Upstream: up.addr, Registry: reg, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Serve(ctx) }()
	m := new(dns.Msg)
	m.SetQuestion("ok.example.", dns.TypeA)
	if in, err := exchange(guest, "tcp", r.Addr().String(), m); err != nil || in.Rcode != dns.RcodeRefused {
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

func TestInflightWaitersBounded(t *testing.T) {
	var f inflight
	f.init(1)
	sb := &egress.Sandbox{}
	rel, err := f.acquire(context.Background(), sb)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	waiters := make(chan error, maxWaitersFactor)
	for range maxWaitersFactor {
		go func() {
			r, err := f.acquire(ctx, sb)
			if err == nil {
				r()
			}
			waiters <- err
		}()
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		f.mu.Lock()
		n := f.by[sb].users
		f.mu.Unlock()
		if n == 1+maxWaitersFactor {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d users", n)
		}
		time.Sleep(time.Millisecond)
	}
	start := time.Now()
	if _, err := f.acquire(context.Background(), sb); !errors.Is(err, errBusy) || time.Since(start) > time.Second {
		t.Fatalf("one waiter too many: %v after %s", err, time.Since(start))
	}
	cancel()
	for range maxWaitersFactor {
		<-waiters
	}
	rel()
}

func TestTCPPerSourceLimit(t *testing.T) {
	e := newEnv(t, Config{MaxTCPPerSource: 3}, zone)
	dial := func(src string) *net.TCPConn {
		c, err := net.DialTCP("tcp", &net.TCPAddr{IP: net.ParseIP(src)}, net.TCPAddrFromAddrPort(e.res.Addr()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	// closed reports whether the server closed c (EOF) rather than leaving it open.
	closed := func(c *net.TCPConn) bool {
		c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
		_, err := c.Read(make([]byte, 1))
		var ne net.Error
		return !(errors.As(err, &ne) && ne.Timeout())
	}
	var held []*net.TCPConn
	for range 3 {
		held = append(held, dial("127.0.0.2"))
	}
	for _, c := range held {
		if closed(c) {
			t.Fatal("a connection within the limit was closed")
		}
	}
	if !closed(dial("127.0.0.2")) {
		t.Fatal("a fourth connection from one source stayed open")
	}
	// Another sandbox has slots of its own; an address that is no sandbox has none.
	spec, err := policy.ParseSpec([]byte(testPolicy))
	if err != nil {
		t.Fatal(err)
	}
	p, err := policy.Compile(spec, nil, policy.Public)
	if err != nil {
		t.Fatal(err)
	}
	e.reg.Add(model.SandboxID("sbx_other"), netip.MustParseAddr("127.0.0.4"), p)
	if closed(dial("127.0.0.4")) {
		t.Fatal("another source was limited")
	}
	if !closed(dial(stranger.String())) {
		t.Fatal("a connection from an address that is no sandbox stayed open")
	}
	held[0].Close()
	time.Sleep(100 * time.Millisecond) // the server sees the close
	c := dial("127.0.0.2")
	if closed(c) {
		t.Fatal("a freed slot was not reused")
	}
	// And it still answers queries.
	m := new(dns.Msg)
	m.SetQuestion("ok.example.", dns.TypeA)
	co := &dns.Conn{Conn: c}
	if err := co.WriteMsg(m); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	in, err := co.ReadMsg()
	if err != nil || in.Rcode != dns.RcodeSuccess {
		t.Fatalf("query on a reused slot: %v %v", in, err)
	}
}
