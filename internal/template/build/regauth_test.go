package build

import (
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"

	"github.com/airlockdev/airlock/internal/model"
)

func TestRegAuths(t *testing.T) {
	var a regAuths
	now := time.Now()
	a.set("bld_a", "alice", "pw", now)
	a.set("bld_old", "bob", "pw", now.Add(-2*regAuthTTL))
	if _, ok := a.get("bld_old"); !ok {
		t.Fatal("set lost bld_old before any expiry ran")
	}
	a.set("bld_b", "carol", "pw", now) // expires bld_old
	if _, ok := a.get("bld_old"); ok {
		t.Error("credentials older than the TTL were kept")
	}
	if b, ok := a.get("bld_a"); !ok || b.Username != "alice" {
		t.Errorf("bld_a: %+v %v", b, ok)
	}
	a.set("bld_a", "", "", time.Time{})
	if _, ok := a.get("bld_a"); ok {
		t.Error("an empty username did not forget bld_a")
	}
	for i := range maxRegAuths + 10 {
		a.set(model.BuildID("bld_"+string(rune('a'+i%26))+time.Duration(i).String()), "u", "p", now.Add(time.Duration(i)))
	}
	if len(a.m) > maxRegAuths {
		t.Errorf("%d credentials kept, bound %d", len(a.m), maxRegAuths)
	}

	// The keychain answers for the pulled reference's registry only.
	r := &Runner{}
	r.SetRegistryAuth("bld_k", "alice", "pw")
	ref, _ := name.ParseReference("ubuntu:22.04")
	kc := r.keychainFor("bld_k", ref.Context().RegistryStr())
	if kc == nil || r.keychainFor("bld_none", "index.docker.io") != nil || r.keychainFor("bld_k", "") != nil {
		t.Fatal("keychainFor: credentials where none were given, or none where they were")
	}
	for _, c := range []struct {
		reg  string
		want authn.AuthConfig
	}{
		{"index.docker.io", authn.AuthConfig{Username: "alice", Password: "pw"}},
		{"evil.example", authn.AuthConfig{}},
	} {
		res, _ := name.NewRegistry(c.reg)
		au, err := kc.Resolve(res)
		if err != nil {
			t.Fatal(err)
		}
		got, err := au.Authorization()
		if err != nil || *got != c.want {
			t.Errorf("%s: %+v %v, want %+v", c.reg, got, err, c.want)
		}
	}
}
