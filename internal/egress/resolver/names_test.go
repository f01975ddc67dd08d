package resolver

import (
	"context"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/airlockdev/airlock/internal/egress/policy"
)

func TestNameLimits(t *testing.T) {
	var l NameLimits // defaults
	for _, tc := range []struct {
		name string
		ok   bool
	}{
		// Real names of services a sandbox commonly needs.
		{"pypi.org", true},
		{"files.pythonhosted.org", true},
		{"registry.npmjs.org", true},
		{"proxy.golang.org", true},
		{"objects.githubusercontent.com", true},
		{"raw.githubusercontent.com", true},
		{"pkg-containers.githubusercontent.com", true},
		{"production.cloudflare.docker.com", true},
		{"generativelanguage.googleapis.com", true},
		{"bedrock-runtime-fips.us-east-1.amazonaws.com", true},
		{"marketplace-visualstudio.example", true},
		{"cognitiveservices.azure.com", true},
		{"login.microsoftonline.com", true},
		{"us-east-1-prod-2024.example", true},
		{"ec2-203-0-113-25.compute-1.amazonaws.com", true},
		{"my-bucket-2023-backups.s3.amazonaws.com", true},
		{"d2qgx4jylglh9c.cloudfront.net", true},
		{"vpce-0a1b2c3d4e5f60718-abcdefgh.s3.us-east-1.vpce.amazonaws.com", false}, // a known false positive (documented)
		{"_acme-challenge.example.com", true},
		{"a.b.c.d.e.f.g.h.i.j.k.l", true},
		// Exfiltration shapes.
		{strings.Repeat("a", 41) + ".evil.example", false},
		{"0123456789abcdef0f1e2d3c4b5a6978.evil.example", false},           // 32 hex digits
		{"mzxw6ytboi4dsnzsgm2dknrxha3tqmbrgiztinjwg4.evil.example", false}, // base32, 42 bytes
		{"kq3n8x0vz2m7p4w1r6t9.evil.example", false},                       // base36, 20 bytes
		{"nbswy3dpeb3w64tmmq.evil.example", true},                          // base32 "hello world", 18 bytes: short encodings pass (the limits shrink the channel, they do not close it)
		{"a.b.c.d.e.f.g.h.i.j.k.l.m", false},                               // 13 labels
		{strings.Repeat("abcdefghij.", 15) + "example", false},             // 172 bytes
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := l.Check(tc.name)
			if (err == nil) != tc.ok {
				t.Fatalf("Check(%q) = %v, want ok=%v", tc.name, err, tc.ok)
			}
		})
	}
	// Negative limits turn checks off.
	off := NameLimits{MaxNameLen: -1, MaxLabels: -1, MaxLabelLen: -1, EntropyMinLen: -1}
	if err := off.Check(strings.Repeat("0123456789abcdef.", 20) + "example"); err != nil {
		t.Errorf("checks off: %v", err)
	}
}

func TestDoHNames(t *testing.T) {
	for _, tc := range []struct {
		name string
		doh  bool
	}{
		{"dns.google", true},
		{"DNS.Google.", true},
		{"mozilla.cloudflare-dns.com", true},
		{"cloudflare-dns.com", true},
		{"abc123.dns.nextdns.io", true},
		{"one.one.one.one", true},
		{"google.com", false},
		{"notdns.google.example", false},
		{"xcloudflare-dns.com", false},
	} {
		if got := policy.IsDoHResolver(tc.name); got != tc.doh {
			t.Errorf("policy.IsDoHResolver(%q) = %v", tc.name, got)
		}
	}
}

func TestEntropyRandom(t *testing.T) {
	// Random base32 labels of 32 bytes are caught in about 90% of cases (documented).
	r := rand.New(rand.NewPCG(1, 2))
	const alpha = "abcdefghijklmnopqrstuvwxyz234567"
	caught := 0
	for range 1000 {
		b := make([]byte, 32)
		for i := range b {
			b[i] = alpha[r.IntN(len(alpha))]
		}
		if (NameLimits{}).Check(string(b)+".example") != nil {
			caught++
		}
	}
	if caught < 850 {
		t.Fatalf("caught %d of 1000 random base32 labels", caught)
	}
}

func FuzzNameLimits(f *testing.F) {
	for _, s := range []string{"pypi.org", "0123456789abcdef0f1e2d3c4b5a6978.evil.example", "a.b", "", ".", "-_-_-_-_-_-_-_-_-_-_"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		var l NameLimits
		if l.Check(name) != nil {
			return
		}
		d := l.withDefaults()
		if len(name) > d.MaxNameLen {
			t.Fatalf("%q passed with %d bytes", name, len(name))
		}
		labels := strings.Split(name, ".")
		if len(labels) > d.MaxLabels {
			t.Fatalf("%q passed with %d labels", name, len(labels))
		}
		for _, lb := range labels {
			if len(lb) > d.MaxLabelLen {
				t.Fatalf("%q passed with a %d-byte label", name, len(lb))
			}
		}
	})
}

// FuzzAnswer feeds arbitrary packets, from the sandbox and from an unknown source, to the
// handler behind the sockets: it must not panic, and whatever it answers must pack.
func FuzzAnswer(f *testing.F) {
	for _, q := range []struct {
		name  string
		qtype uint16
	}{{"ok.example.", dns.TypeA}, {"www.ok.example.", dns.TypeA}, {"rebind.example.", dns.TypeA},
		{"svc.ok.example.", dns.TypeHTTPS}, {"blocked.example.", dns.TypeTXT}, {"dns.google.", dns.TypeA}} {
		m := new(dns.Msg)
		m.SetQuestion(q.name, q.qtype)
		m.SetEdns0(4096, true)
		b, err := m.Pack()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, false)
		f.Add(b, true)
	}
	f.Add([]byte{0, 0, 0x80, 0, 0, 1, 0, 0, 0, 0, 0, 0}, false)
	e := newEnv(f, Config{}, zone)
	f.Fuzz(func(t *testing.T, pkt []byte, fromStranger bool) {
		req := new(dns.Msg)
		if err := req.Unpack(pkt); err != nil {
			return // miekg/dns's server answers what it cannot parse itself (FORMERR or nothing)
		}
		src := guest
		if fromStranger {
			src = stranger
		}
		for _, tcp := range []bool{false, true} {
			start := time.Now()
			resp := e.res.answer(context.Background(), src, tcp, req.Copy())
			if d := time.Since(start); d > 3*time.Second {
				t.Fatalf("answer took %s for\n%v", d, req)
			}
			if src == stranger && resp != nil {
				t.Fatalf("reply to an unknown source:\n%v", resp)
			}
			if resp == nil {
				continue
			}
			out, err := resp.Pack()
			if err != nil {
				t.Fatalf("answer does not pack: %v\n%v", err, resp)
			}
			if !tcp && len(out) > max(dns.MinMsgSize, ednsSize(req)) {
				t.Fatalf("UDP answer of %d bytes for a client buffer of %d", len(out), ednsSize(req))
			}
			if resp.Id != req.Id {
				t.Fatal("id not echoed")
			}
		}
	})
}

func ednsSize(m *dns.Msg) int {
	if o := m.IsEdns0(); o != nil {
		return int(o.UDPSize())
	}
	return 0
}
