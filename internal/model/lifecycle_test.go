package model

import (
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
)

// declaredConsts returns the names and values of the constants of type typ
// declared in this package's non-test sources.
func declaredConsts(t *testing.T, typ string) map[string]string {
	t.Helper()
	fset := token.NewFileSet()
	names, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			gd, ok := d.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST {
				continue
			}
			for _, spec := range gd.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, name := range vs.Names {
					if v, ok := constOfType(vs, i, typ); ok {
						out[name.Name] = v
					}
				}
			}
		}
	}
	return out
}

// constOfType returns the value of the i-th constant of vs if it has type
// typ, declared either as `Name typ = "v"` or as `Name = typ("v")`.
func constOfType(vs *ast.ValueSpec, i int, typ string) (string, bool) {
	if i >= len(vs.Values) {
		return "", false
	}
	val := vs.Values[i]
	if id, ok := vs.Type.(*ast.Ident); !ok || id.Name != typ {
		call, ok := val.(*ast.CallExpr)
		if !ok || len(call.Args) != 1 {
			return "", false
		}
		if fn, ok := call.Fun.(*ast.Ident); !ok || fn.Name != typ {
			return "", false
		}
		val = call.Args[0]
	}
	lit, ok := val.(*ast.BasicLit)
	if !ok || lit.Kind != token.STRING {
		return "", false
	}
	return strings.Trim(lit.Value, "\"`"), true
}

// TestLifecycleCoversKinds fails when an operation kind is declared that the
// lifecycle table lacks (or the table lists a kind that is not declared), and
// likewise for worker steps.
func TestLifecycleCoversKinds(t *testing.T) {
	kinds := declaredConsts(t, "OperationKind")
	if len(kinds) == 0 {
		t.Fatal("found no OperationKind constants")
	}
	for name, v := range kinds {
		if _, err := LifecycleOf(OperationKind(v)); err != nil {
			t.Errorf("operation kind %s (%q) has no entry in the lifecycle table: %v", name, v, err)
		}
	}
	if got := len(AllOperationKinds()); got != len(kinds) {
		t.Errorf("lifecycle table has %d kinds, the package declares %d", got, len(kinds))
	}
	steps := map[Step]bool{}
	for _, v := range declaredConsts(t, "Step") {
		steps[Step(v)] = false
	}
	for _, l := range Lifecycles() {
		for _, s := range []Step{l.Step, l.Cleanup} {
			if s == "" {
				continue
			}
			if _, ok := steps[s]; !ok {
				t.Errorf("lifecycle %s uses undeclared step %q", l.Kind, s)
			}
			steps[s] = true
		}
	}
	for s, used := range steps {
		if !used {
			t.Errorf("step %q is declared but no lifecycle runs it", s)
		}
	}
}

func TestLifecycleTableMatchesStateMachine(t *testing.T) {
	if err := CheckLifecycles(); err != nil {
		t.Fatal(err)
	}
	for _, l := range Lifecycles() {
		if l.InProgress.Terminal() || !l.Final.Terminal() && l.Final == l.InProgress {
			t.Errorf("lifecycle %s: in-progress %s / final %s", l.Kind, l.InProgress, l.Final)
		}
	}
}

func TestLifecycleCheck(t *testing.T) {
	for _, tc := range []struct {
		name string
		l    Lifecycle
		ok   bool
	}{
		{"create", Lifecycle{Kind: "k", From: []SandboxState{StatePending}, InProgress: StateCreating, Final: StateRunning, Failure: StateFailed, Step: StepEnsure}, true},
		{"retried failure", Lifecycle{Kind: "k", From: []SandboxState{StateRunning}, InProgress: StateDeleting, Final: StateDeleted, Failure: StateDeleting, Step: StepDestroy}, true},
		{"no step", Lifecycle{Kind: "k", From: []SandboxState{StatePending}, InProgress: StateCreating, Final: StateRunning, Failure: StateFailed}, false},
		{"no start", Lifecycle{Kind: "k", InProgress: StateCreating, Final: StateRunning, Failure: StateFailed, Step: StepEnsure}, false},
		{"bad start", Lifecycle{Kind: "k", From: []SandboxState{StateDeleted}, InProgress: StateCreating, Final: StateRunning, Failure: StateFailed, Step: StepEnsure}, false},
		{"bad final", Lifecycle{Kind: "k", From: []SandboxState{StatePending}, InProgress: StateCreating, Final: StateSuspended, Failure: StateFailed, Step: StepEnsure}, false},
		{"bad failure", Lifecycle{Kind: "k", From: []SandboxState{StatePending}, InProgress: StateCreating, Final: StateRunning, Failure: StatePaused, Step: StepEnsure}, false},
		{"stopped", Lifecycle{Kind: "k", From: []SandboxState{StateRunning}, InProgress: StateSuspending, Final: StateSuspended, Failure: StateRunning, Stopped: StateFailed, Step: StepSuspend}, true},
		{"bad stopped", Lifecycle{Kind: "k", From: []SandboxState{StateRunning}, InProgress: StateSuspending, Final: StateSuspended, Failure: StateRunning, Stopped: StatePaused, Step: StepSuspend}, false},
		{"stopped of a retried kind", Lifecycle{Kind: "k", From: []SandboxState{StateRunning}, InProgress: StateDeleting, Final: StateDeleted, Failure: StateDeleting, Stopped: StateDeleted, Step: StepDestroy}, false},
	} {
		if err := tc.l.check(); (err == nil) != tc.ok {
			t.Errorf("%s: check = %v, want ok=%v", tc.name, err, tc.ok)
		}
	}
}

func TestParseOperationKind(t *testing.T) {
	for _, k := range AllOperationKinds() {
		got, err := ParseOperationKind(string(k))
		if err != nil || got != k {
			t.Errorf("ParseOperationKind(%q) = %q, %v", k, got, err)
		}
		if err := k.Validate(); err != nil {
			t.Errorf("%s.Validate() = %v", k, err)
		}
	}
	for _, s := range []string{"", "Create", "hibernate", "create "} {
		if _, err := ParseOperationKind(s); !errors.Is(err, ErrInvalid) {
			t.Errorf("ParseOperationKind(%q) = %v, want ErrInvalid", s, err)
		}
	}
}

func TestLifecycleStart(t *testing.T) {
	del, err := LifecycleOf(OpDelete)
	if err != nil {
		t.Fatal(err)
	}
	create, err := LifecycleOf(OpCreate)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		l    Lifecycle
		from SandboxState
		ok   bool
	}{
		{create, StatePending, true},
		{create, StateRunning, false},
		{del, StateRunning, true},
		{del, StateFailed, true},
		{del, StateDeleting, false},
		{del, StateDeleted, false},
	} {
		err := tc.l.CheckStart(tc.from)
		if (err == nil) != tc.ok || (err != nil && !errors.Is(err, ErrInvalidTransition)) {
			t.Errorf("%s from %s: %v, want ok=%v", tc.l.Kind, tc.from, err, tc.ok)
		}
	}
	// The table is not mutable through its accessors.
	ls := Lifecycles()
	ls[0].From[0] = StateDeleted
	if l, _ := LifecycleOf(ls[0].Kind); l.From[0] == StateDeleted {
		t.Fatal("Lifecycles shares its start states with the table")
	}
}
