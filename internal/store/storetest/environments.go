package storetest

import (
	"crypto/sha256"
	"reflect"
	"strings"
	"sync"

	"github.com/airlockdev/airlock/internal/environment"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/store"
)

func environmentTests() []namedTest {
	return []namedTest{
		{"EnvironmentsPutOnce", testEnvironmentsPutOnce},
		{"EnvironmentsRefused", testEnvironmentsRefused},
		{"NodeEnvironmentsReplace", testNodeEnvironmentsReplace},
		{"EnvironmentsConcurrentPut", testEnvironmentsConcurrentPut},
	}
}

// envRecord makes the record of a valid definition of name; version tells
// definitions of the same name apart.
func (e *env) envRecord(name environment.Name, version string) store.EnvironmentRecord {
	e.t.Helper()
	host := environment.HostPlatform()
	d := environment.Definition{
		SchemaVersion: environment.SchemaVersion,
		Name:          name,
		Host:          host,
		Runtime: environment.RuntimeBinding{
			Name: string(name), Version: version,
			BinaryDigest: environment.DigestOf(sha256.Sum256([]byte(version))),
		},
		Guest:     host,
		Isolation: environment.IsolationSharedKernel,
		Snapshot:  environment.Snapshot{Capability: environment.SnapshotNone},
		OOMScope:  environment.OOMKillsProcess,
	}
	c, err := d.Canonical() // validates d
	must(e.t, err)
	ref, err := d.Ref()
	must(e.t, err)
	return store.EnvironmentRecord{Ref: ref, Name: name, SchemaVersion: d.SchemaVersion, Definition: c, FirstSeen: e.now()}
}

func (e *env) putEnv(rec store.EnvironmentRecord) {
	e.t.Helper()
	created, err := e.s.PutEnvironment(e.ctx, rec)
	must(e.t, err)
	if !created {
		e.t.Fatalf("PutEnvironment(%s): created = false", rec.Ref)
	}
}

func sameEnv(e *env, got, want store.EnvironmentRecord) {
	e.t.Helper()
	want.FirstSeen = us(want.FirstSeen)
	if !reflect.DeepEqual(got, want) {
		e.t.Fatalf("environment = %+v\nwant %+v", got, want)
	}
}

func testEnvironmentsPutOnce(e *env) {
	t := e.t
	_, err := e.s.GetEnvironment(e.ctx, model.EnvironmentRefOf(sha256.Sum256([]byte("none"))))
	mustIs(t, err, store.ErrNotFound)
	list, err := e.s.ListEnvironments(e.ctx)
	must(t, err)
	if len(list) != 0 {
		t.Fatalf("a fresh store lists %d environments", len(list))
	}

	runsc := e.envRecord(environment.NameRunsc, "1")
	runc1 := e.envRecord(environment.NameRunc, "1")
	runc2 := e.envRecord(environment.NameRunc, "2")
	for _, r := range []store.EnvironmentRecord{runsc, runc2, runc1} {
		e.putEnv(r)
	}
	got, err := e.s.GetEnvironment(e.ctx, runsc.Ref)
	must(t, err)
	sameEnv(e, got, runsc)
	if _, err := environment.Parse(got.Definition); err != nil {
		t.Fatalf("the stored definition does not parse: %v", err)
	}

	// A second put of the same reference changes nothing: FirstSeen stays.
	again := runsc
	again.FirstSeen = e.now()
	created, err := e.s.PutEnvironment(e.ctx, again)
	must(t, err)
	if created {
		t.Fatal("the second PutEnvironment of a reference created it")
	}
	got, err = e.s.GetEnvironment(e.ctx, runsc.Ref)
	must(t, err)
	sameEnv(e, got, runsc)

	// Name order, then first seen.
	list, err = e.s.ListEnvironments(e.ctx)
	must(t, err)
	if len(list) != 3 {
		t.Fatalf("ListEnvironments: %d rows, want 3", len(list))
	}
	for i, want := range []store.EnvironmentRecord{runc1, runc2, runsc} {
		sameEnv(e, list[i], want)
	}
}

func testEnvironmentsRefused(e *env) {
	good := e.envRecord(environment.NameCrun, "1")
	for _, tc := range []struct {
		name string
		edit func(r *store.EnvironmentRecord)
	}{
		{"ref of another definition", func(r *store.EnvironmentRecord) {
			r.Ref = model.EnvironmentRefOf(sha256.Sum256([]byte("other")))
		}},
		{"definition changed", func(r *store.EnvironmentRecord) {
			r.Definition = []byte(strings.Replace(string(r.Definition), `"1"`, `"2"`, 1))
		}},
		{"malformed ref", func(r *store.EnvironmentRecord) { r.Ref = "env:sha256:xyz" }},
		{"unknown name", func(r *store.EnvironmentRecord) { r.Name = "lxc" }},
		{"no schema version", func(r *store.EnvironmentRecord) { r.SchemaVersion = 0 }},
	} {
		r := good
		tc.edit(&r)
		_, err := e.s.PutEnvironment(e.ctx, r)
		if err == nil {
			e.t.Fatalf("%s: PutEnvironment succeeded", tc.name)
		}
		mustIs(e.t, err, model.ErrInvalid)
	}
	list, err := e.s.ListEnvironments(e.ctx)
	must(e.t, err)
	if len(list) != 0 {
		e.t.Fatalf("refused puts stored %d environments", len(list))
	}
}

func testNodeEnvironmentsReplace(e *env) {
	t := e.t
	runsc, runc := e.envRecord(environment.NameRunsc, "1"), e.envRecord(environment.NameRunc, "1")
	e.putEnv(runsc)
	e.putEnv(runc)
	n1, n2 := model.NewNodeID(), model.NewNodeID()
	at := e.now()
	rows1 := []store.NodeEnvironment{
		{NodeID: n1, Ref: runsc.Ref, Enabled: true, Available: true, CheckedAt: at},
		{NodeID: n1, Ref: runc.Ref, Enabled: false, Available: false, Reason: "probe runc: boom", CheckedAt: at},
	}
	must(t, e.s.SetNodeEnvironments(e.ctx, n1, rows1))
	rows2 := []store.NodeEnvironment{{NodeID: n2, Ref: runsc.Ref, Enabled: true, Available: false, Reason: "gone", CheckedAt: at}}
	must(t, e.s.SetNodeEnvironments(e.ctx, n2, rows2))

	list := func(q store.NodeEnvironmentQuery) []store.NodeEnvironment {
		t.Helper()
		got, err := e.s.ListNodeEnvironments(e.ctx, q)
		must(t, err)
		for i := range got {
			got[i].CheckedAt = us(got[i].CheckedAt)
		}
		return got
	}
	norm := func(rows ...store.NodeEnvironment) []store.NodeEnvironment {
		out := []store.NodeEnvironment{}
		for _, r := range rows {
			r.CheckedAt = us(r.CheckedAt)
			out = append(out, r)
		}
		return out
	}
	check := func(what string, got, want []store.NodeEnvironment) {
		t.Helper()
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%s:\n got %+v\nwant %+v", what, got, want)
		}
	}
	byRef := func(a, b store.NodeEnvironment) []store.NodeEnvironment {
		if a.Ref > b.Ref || a.Ref == b.Ref && a.NodeID > b.NodeID {
			a, b = b, a
		}
		return norm(a, b)
	}
	check("node 1", list(store.NodeEnvironmentQuery{NodeID: n1}), byRef(rows1[0], rows1[1]))
	check("runsc", list(store.NodeEnvironmentQuery{Ref: runsc.Ref}), byRef(rows1[0], rows2[0]))
	check("node 2 runc", list(store.NodeEnvironmentQuery{NodeID: n2, Ref: runc.Ref}), norm())
	if got := list(store.NodeEnvironmentQuery{}); len(got) != 3 {
		t.Fatalf("every row: %d, want 3", len(got))
	}

	// A restart with another set replaces the node's rows, not others'.
	later := e.now()
	rows1b := []store.NodeEnvironment{{NodeID: n1, Ref: runc.Ref, Enabled: true, Available: true, CheckedAt: later}}
	must(t, e.s.SetNodeEnvironments(e.ctx, n1, rows1b))
	check("node 1 after restart", list(store.NodeEnvironmentQuery{NodeID: n1}), norm(rows1b...))
	check("node 2 untouched", list(store.NodeEnvironmentQuery{NodeID: n2}), norm(rows2...))

	// An unknown reference fails the whole replacement.
	unknown := model.EnvironmentRefOf(sha256.Sum256([]byte("unknown")))
	err := e.s.SetNodeEnvironments(e.ctx, n1, []store.NodeEnvironment{
		{NodeID: n1, Ref: runsc.Ref, Enabled: true, Available: true, CheckedAt: later},
		{NodeID: n1, Ref: unknown, CheckedAt: later},
	})
	mustIs(t, err, store.ErrNotFound)
	check("node 1 after a failed replacement", list(store.NodeEnvironmentQuery{NodeID: n1}), norm(rows1b...))

	// Rows of another node, or the same reference twice, are refused.
	err = e.s.SetNodeEnvironments(e.ctx, n1, rows2)
	mustIs(t, err, model.ErrInvalid)
	err = e.s.SetNodeEnvironments(e.ctx, n1, []store.NodeEnvironment{rows1b[0], rows1b[0]})
	mustIs(t, err, model.ErrInvalid)

	// No rows: the node has none.
	must(t, e.s.SetNodeEnvironments(e.ctx, n1, nil))
	check("node 1 emptied", list(store.NodeEnvironmentQuery{NodeID: n1}), norm())
}

// testEnvironmentsConcurrentPut: nodes starting at once record the same
// definition; exactly one of them creates it.
func testEnvironmentsConcurrentPut(e *env) {
	rec := e.envRecord(environment.NameRunsc, "1")
	const n = 8
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		created int
		errs    []error
	)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := e.s.PutEnvironment(e.ctx, rec)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
			}
			if c {
				created++
			}
		}()
	}
	wg.Wait()
	if len(errs) > 0 || created != 1 {
		e.t.Fatalf("%d concurrent puts: %d created, errors %v", n, created, errs)
	}
}
