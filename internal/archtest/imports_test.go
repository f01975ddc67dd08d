package archtest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/airlockdev/airlock/internal/airtest"
)

// The import rules between layers, written once. Each rule is about the
// packages pkgs names and says, in any combination:
//
//   - only: the packages of this module they may import directly; every
//     other package of the module is refused (packages outside the module,
//     the standard library and third parties, are not limited by it);
//   - never: packages they must not depend on at all, directly or through
//     any other package (what `go list -deps` shows);
//   - notDirect: packages they must not import themselves (what they reach
//     through a lower layer is that layer's business).
//
// A pattern is a package path, with "/..." for the package and everything
// under it. A pattern whose first element has no dot ("internal/store") is
// relative to this module; one with a dot ("github.com/google/nftables")
// is an import path as written. Only the packages' own files count, not
// their tests (go list without -test).
var importRules = []importRule{
	{
		pkgs: "internal/model",
		only: []string{"internal/textclip"}, // a leaf: it imports nothing of the module
		why:  "the domain nouns are the bottom layer: every other package may import them",
	},
	{
		pkgs: "internal/textclip",
		only: []string{},
		why:  "text cut for people is a leaf the domain nouns may use",
	},
	{
		pkgs:  "internal/apiv1",
		only:  []string{}, // a leaf: it imports nothing of the module
		never: []string{"connectrpc.com/connect/..."},
		why:   "the wire types and the error vocabulary are a leaf that server, client, CLI and the E2B translation all import; Connect codes are kept by name and parsed in internal/e2b/connecterr",
	},
	{
		pkgs: "internal/store/...",
		only: []string{
			"internal/store/...",
			"internal/model",
			"internal/egress/policy", // the egress specs and profiles it keeps
			"internal/environment",   // the execution environment definitions it keeps
			"internal/tracing",       // sqlstore's spans
			"internal/retry",         // postgres' listener backoff
		},
		never: []string{
			"internal/runtime/...",
			"internal/egress/nftrules",
			"internal/metrics",
			"github.com/google/nftables/...",
			"github.com/mdlayher/netlink/...",
			"github.com/vishvananda/netlink/...",
		},
		why: "the store keeps desired state; it links neither runtimes nor the kernel's network configuration, and metrics read it, not the other way round",
	},
	{
		pkgs:  "internal/environment",
		never: []string{"internal/runtime/...", "internal/store/..."},
		why:   "execution environment descriptors are what the store keeps and the words runtimes describe themselves in, so both import them; the node's registry, which turns a runtime's Info into a Definition and records it in the store, is internal/environment/registry",
	},
	{
		pkgs: "internal/egress/policy",
		never: []string{
			"internal/egress/nftrules",
			"github.com/google/nftables/...",
			"github.com/mdlayher/netlink/...",
			"github.com/vishvananda/netlink/...",
		},
		why: "the policy owns the always-denied destinations; nftrules builds its sets from policy's list, not the other way round",
	},
	{
		pkgs:  "internal/egress/secrets",
		never: []string{"internal/store/..."},
		why:   "the store keeps a sealed secret as model.SealedSecret; the sealing package needs no store",
	},
	{
		pkgs:  "internal/metrics",
		never: []string{"internal/store/..."},
		why:   "metrics read the store through an interface of their own (metrics.Store), adapted by internal/server",
	},
	{
		pkgs:  "internal/api",
		never: []string{"internal/dataplane", "internal/agentclient"},
		why:   "the management API reaches guests through internal/guestops (the server wires in agentguest) and links neither the data plane nor the agent client",
	},
	{
		pkgs:      "internal/api",
		notDirect: []string{"internal/placement"},
		why:       "sandboxes are created, placed, claimed from pools and moved through their lifecycle by internal/sandboxes; the API decodes, authorizes and encodes",
	},
	{
		pkgs:  "internal/guestops",
		only:  []string{"internal/model", "internal/apiv1"},
		never: []string{"internal/agentclient"},
		why:   "guest operations as the API and the data plane share them name no agent client: internal/guestops/agentguest implements them over it",
	},
	{
		pkgs: "internal/sandboxes",
		only: []string{
			"internal/model",
			"internal/store",         // desired state, behind the interfaces it declares
			"internal/placement",     // the node of a new sandbox
			"internal/environment",   // the environment a create names
			"internal/egress",        // a claimed sandbox's live egress state
			"internal/egress/policy", // the policy a create stores
			"internal/guestops",      // the refusal of a sandbox that does not run
			"internal/metrics",       // pool claims counted as finished creates
		},
		never: []string{
			"internal/api",
			"internal/dataplane",
			"internal/agentclient",
			"internal/worker",
			"internal/runtime/...",
		},
		notDirect: []string{"internal/apiv1"},
		why:       "the sandboxes service sits between the API and the store: it takes and returns domain values, knows no wire types or HTTP, and reaches no guest, worker or runtime",
	},
	{
		pkgs:      "internal/cli",
		notDirect: []string{"internal/bench"},
		why:       "the benchmarks are not part of the product binary",
	},
}

// knownViolations are edges that importRules forbid and the tree still
// has, each being removed on a branch of its own. The test logs them
// instead of failing, and fails once one no longer exists, so that its
// line goes with the fix. Nothing else belongs here: a new violation is
// fixed, not listed.
var knownViolations = []importEdge{}

// importRule is one rule of importRules (see there for its fields).
type importRule struct {
	pkgs      string
	only      []string // nil: no limit; empty: nothing of the module
	never     []string
	notDirect []string
	why       string
}

// importEdge is a forbidden dependency: from imports to, directly or (for
// a never rule) through other packages.
type importEdge struct{ from, to string }

// goPackage is what the test reads of `go list -deps -json`.
type goPackage struct {
	ImportPath string
	Imports    []string
	Deps       []string
	Module     *goModule
	Error      *struct{ Err string }
}

type goModule struct {
	Path string
	Main bool // the module whose packages the rules are about
}

// packageGraph is every package the module's packages build from.
type packageGraph struct {
	module string                // the module's path
	pkgs   map[string]*goPackage // by import path, the module's and their dependencies
	own    []string              // the module's packages, sorted
}

// loadPackages runs go list once over the module.
func loadPackages(t *testing.T) *packageGraph {
	t.Helper()
	cmd := exec.Command("go", "list", "-deps", "-json=ImportPath,Imports,Deps,Module,Error", "./...")
	cmd.Dir = airtest.ModuleRoot(t)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.Bytes())
	}
	g := &packageGraph{pkgs: map[string]*goPackage{}}
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p goPackage
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("decode go list output: %v", err)
		}
		if p.Error != nil {
			t.Fatalf("go list: %s: %s", p.ImportPath, p.Error.Err)
		}
		g.pkgs[p.ImportPath] = &p
		if p.Module != nil && p.Module.Main {
			g.module = p.Module.Path
			g.own = append(g.own, p.ImportPath)
		}
	}
	if g.module == "" {
		t.Fatal("go list named no package of the main module")
	}
	slices.Sort(g.own)
	return g
}

// path turns a pattern into an import path (still ending in "/..." if it did).
func (g *packageGraph) path(pattern string) string {
	first, _, _ := strings.Cut(pattern, "/")
	if strings.Contains(first, ".") {
		return pattern
	}
	return g.module + "/" + pattern
}

// rel is an import path as the rules write it: relative to the module
// when it is the module's.
func (g *packageGraph) rel(importPath string) string {
	if r, ok := strings.CutPrefix(importPath, g.module+"/"); ok {
		return r
	}
	return importPath
}

// matches reports whether importPath is named by pattern.
func (g *packageGraph) matches(pattern, importPath string) bool {
	p := g.path(pattern)
	if tree, ok := strings.CutSuffix(p, "/..."); ok {
		return importPath == tree || strings.HasPrefix(importPath, tree+"/")
	}
	return importPath == p
}

func (g *packageGraph) matchesAny(patterns []string, importPath string) bool {
	return slices.ContainsFunc(patterns, func(p string) bool { return g.matches(p, importPath) })
}

// isOwn reports whether importPath is a package of the module.
func (g *packageGraph) isOwn(importPath string) bool {
	return importPath == g.module || strings.HasPrefix(importPath, g.module+"/")
}

// namesOwn reports whether a pattern names at least one of the module's
// packages.
func (g *packageGraph) namesOwn(pattern string) bool {
	return slices.ContainsFunc(g.own, func(p string) bool { return g.matches(pattern, p) })
}

// nearest returns a shortest import chain from a package to the nearest
// package that pattern names, the package itself excluded (nil if none).
func (g *packageGraph) nearest(from, pattern string) []string {
	prev := map[string]string{from: ""}
	queue := []string{from}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		if p != from && g.matches(pattern, p) {
			var out []string
			for ; p != ""; p = prev[p] {
				out = append(out, g.rel(p))
			}
			slices.Reverse(out)
			return out
		}
		if pkg := g.pkgs[p]; pkg != nil {
			for _, imp := range pkg.Imports {
				if _, seen := prev[imp]; !seen {
					prev[imp] = p
					queue = append(queue, imp)
				}
			}
		}
	}
	return nil
}

// violation is one broken rule.
type violation struct {
	edge importEdge
	msg  string
}

// check applies the rules to the graph and returns what breaks them, in
// a stable order, and the problems of the rules themselves (patterns that
// name none of the module's packages).
func check(g *packageGraph, rules []importRule) (violations []violation, ruleErrs []string) {
	for _, r := range rules {
		if !g.namesOwn(r.pkgs) {
			ruleErrs = append(ruleErrs, fmt.Sprintf("rule %q names no package of the module", r.pkgs))
		}
		for _, list := range [][]string{r.only, r.never, r.notDirect} {
			for _, pat := range list {
				if g.path(pat) != pat && !g.namesOwn(pat) { // the module's, and none there
					ruleErrs = append(ruleErrs, fmt.Sprintf("rule %q: %q names no package of the module", r.pkgs, pat))
				}
			}
		}
		for _, p := range g.own {
			if !g.matches(r.pkgs, p) {
				continue
			}
			pkg := g.pkgs[p]
			for _, imp := range pkg.Imports {
				switch {
				case r.only != nil && g.isOwn(imp) && !g.matchesAny(r.only, imp):
					violations = append(violations, violation{importEdge{g.rel(p), g.rel(imp)},
						fmt.Sprintf("%s imports %s, which its rule does not allow (only %s): %s", g.rel(p), g.rel(imp), strings.Join(r.only, ", "), r.why)})
				case g.matchesAny(r.notDirect, imp):
					violations = append(violations, violation{importEdge{g.rel(p), g.rel(imp)},
						fmt.Sprintf("%s imports %s: %s", g.rel(p), g.rel(imp), r.why)})
				}
			}
			// One finding per forbidden pattern: the nearest package it
			// names, by a shortest chain (not every package under it).
			for _, pat := range r.never {
				if !slices.ContainsFunc(pkg.Deps, func(d string) bool { return g.matches(pat, d) }) {
					continue
				}
				chain := g.nearest(p, pat)
				if chain == nil { // Deps and Imports disagree: say so rather than hide it
					chain = []string{g.rel(p), "…", pat}
				}
				to := chain[len(chain)-1]
				violations = append(violations, violation{importEdge{g.rel(p), to},
					fmt.Sprintf("%s depends on %s (%s): %s", g.rel(p), to, strings.Join(chain, " → "), r.why)})
			}
		}
	}
	slices.SortFunc(violations, func(a, b violation) int { return strings.Compare(a.msg, b.msg) })
	return violations, ruleErrs
}

func TestImportRules(t *testing.T) {
	g := loadPackages(t)
	violations, ruleErrs := check(g, importRules)
	for _, e := range ruleErrs {
		t.Error(e)
	}
	seen := map[importEdge]bool{}
	for _, v := range violations {
		if slices.Contains(knownViolations, v.edge) {
			seen[v.edge] = true
			t.Logf("known violation, being fixed elsewhere: %s", v.msg)
			continue
		}
		t.Error(v.msg)
	}
	for _, e := range knownViolations {
		if !seen[e] {
			t.Errorf("%s no longer imports %s: delete the edge from knownViolations", e.from, e.to)
		}
	}
}

// TestImportRulesCatch checks the checker on a made-up graph: each kind
// of rule reports what it should and nothing else.
func TestImportRulesCatch(t *testing.T) {
	const m = "example.com/m"
	own := func(path string, imports []string, deps ...string) *goPackage {
		return &goPackage{ImportPath: path, Imports: imports, Deps: deps, Module: &goModule{Path: m, Main: true}}
	}
	g := &packageGraph{module: m, pkgs: map[string]*goPackage{}}
	for _, p := range []*goPackage{
		own(m+"/internal/low", nil),
		own(m+"/internal/mid", []string{m + "/internal/low", "github.com/x/kernel"}, m+"/internal/low", "github.com/x/kernel", "github.com/x/kernel/sub"),
		own(m+"/internal/top", []string{m + "/internal/mid", "fmt"}, m+"/internal/mid", m+"/internal/low", "github.com/x/kernel", "github.com/x/kernel/sub", "fmt"),
		own(m+"/internal/top/sub", []string{m + "/internal/low"}, m+"/internal/low"),
		{ImportPath: "github.com/x/kernel", Imports: []string{"github.com/x/kernel/sub"}, Deps: []string{"github.com/x/kernel/sub"}},
		{ImportPath: "github.com/x/kernel/sub"},
	} {
		g.pkgs[p.ImportPath] = p
		if p.Module != nil {
			g.own = append(g.own, p.ImportPath)
		}
	}
	slices.Sort(g.own)
	msgs := func(rules ...importRule) []string {
		vs, errs := check(g, rules)
		out := errs
		for _, v := range vs {
			out = append(out, v.msg)
		}
		return out
	}
	for _, tc := range []struct {
		name string
		rule importRule
		want []string
	}{
		{"only allows", importRule{pkgs: "internal/top/...", only: []string{"internal/mid", "internal/low"}}, nil},
		{"only refuses", importRule{pkgs: "internal/top/...", only: []string{"internal/mid"}, why: "w"},
			[]string{"internal/top/sub imports internal/low, which its rule does not allow (only internal/mid): w"}},
		{"only ignores other modules", importRule{pkgs: "internal/mid", only: []string{"internal/low"}}, nil},
		{"never, through others", importRule{pkgs: "internal/top", never: []string{"github.com/x/kernel/..."}, why: "w"},
			[]string{"internal/top depends on github.com/x/kernel (internal/top → internal/mid → github.com/x/kernel): w"}},
		{"never, the nearest of a tree", importRule{pkgs: "internal/top", never: []string{"github.com/x/kernel/sub"}, why: "w"},
			[]string{"internal/top depends on github.com/x/kernel/sub (internal/top → internal/mid → github.com/x/kernel → github.com/x/kernel/sub): w"}},
		{"notDirect is direct only", importRule{pkgs: "internal/top", notDirect: []string{"internal/low"}}, nil},
		{"notDirect refuses", importRule{pkgs: "internal/mid", notDirect: []string{"internal/low"}, why: "w"},
			[]string{"internal/mid imports internal/low: w"}},
		{"a typo is an error", importRule{pkgs: "internal/lwo", never: []string{"internal/top/sub/..."}, notDirect: []string{"internal/nope"}},
			[]string{`rule "internal/lwo" names no package of the module`, `rule "internal/lwo": "internal/nope" names no package of the module`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := msgs(tc.rule); !slices.Equal(got, tc.want) {
				t.Errorf("got\n\t%s\nwant\n\t%s", strings.Join(got, "\n\t"), strings.Join(tc.want, "\n\t"))
			}
		})
	}
}
