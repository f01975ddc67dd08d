package codeinterp

import (
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// needPython skips unless the server's python3 has the modules.
func needPython(t *testing.T, s *interp, modules ...string) {
	t.Helper()
	for _, m := range modules {
		if err := exec.Command(s.python, "-c", "import "+m).Run(); err != nil {
			t.Skipf("%s is not installed for the host's python3; the template's SDK test (parity-codeinterp.mjs) covers it", m)
		}
	}
}

// chartOf runs code and returns the chart of its only figure result, which
// must carry a PNG too.
func chartOf(t *testing.T, s *interp, code string) map[string]any {
	t.Helper()
	e := s.run(t, code)
	if em := e.err(); em != nil {
		t.Fatalf("error %v", em)
	}
	rs := e.of("result")
	if len(rs) != 1 || rs[0].str("png") == "" || !strings.HasPrefix(rs[0].str("text"), "<Figure size") {
		t.Fatalf("results %v", rs)
	}
	c, _ := rs[0]["chart"].(map[string]any)
	if c == nil {
		t.Fatalf("no chart in %v", rs[0])
	}
	return c
}

// round-trips v through JSON so that numbers compare as float64.
func jsonOf(t *testing.T, v any) any {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var out any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

func field(c map[string]any, path ...any) any {
	var v any = c
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, _ := v.(map[string]any)
			v = m[k]
		case int:
			a, _ := v.([]any)
			if k >= len(a) {
				return nil
			}
			v = a[k]
		}
	}
	return v
}

func column(c map[string]any, key string) []any {
	var out []any
	els, _ := c["elements"].([]any)
	for _, e := range els {
		out = append(out, e.(map[string]any)[key])
	}
	return out
}

// matplotlib figures come back as E2B's charts (the cases of E2B's own
// chart tests), beside their PNG.
func TestCodeInterpreterCharts(t *testing.T) {
	s := startServer(t)
	needPython(t, s, "matplotlib", "numpy")

	t.Run("line with dates", func(t *testing.T) {
		c := chartOf(t, s, `
import numpy as np
import matplotlib.pyplot as plt
import datetime
dates = [datetime.date(2023, 9, 1) + datetime.timedelta(days=i) for i in range(100)]
x = np.linspace(0, 2*np.pi, 100)
plt.figure(figsize=(10, 6))
plt.plot(dates, np.sin(x), label='sin(x)')
plt.plot(dates, np.cos(x), label='cos(x)')
plt.xlabel("Time (s)")
plt.ylabel("Amplitude (Hz)")
plt.title('Plot of sin(x) and cos(x)')
plt.show()`)
		for k, want := range map[string]any{"type": "line", "title": "Plot of sin(x) and cos(x)", "x_label": "Time (s)", "y_label": "Amplitude (Hz)",
			"x_unit": "s", "y_unit": "Hz", "x_scale": "datetime", "y_scale": "linear"} {
			if c[k] != want {
				t.Errorf("%s = %v, want %v", k, c[k], want)
			}
		}
		if got := column(c, "label"); !slices.Equal(got, []any{"sin(x)", "cos(x)"}) {
			t.Errorf("labels %v", got)
		}
		pts, _ := field(c, "elements", 0, "points").([]any)
		if len(pts) != 100 || field(c, "elements", 0, "points", 0, 0) != "2023-09-01" || field(c, "elements", 0, "points", 0, 1) != 0.0 {
			t.Errorf("%d points, first %v", len(pts), field(c, "elements", 0, "points", 0))
		}
		if tick, _ := field(c, "x_ticks", 0).(string); !strings.HasPrefix(tick, "2023-") {
			t.Errorf("x_ticks %v", c["x_ticks"])
		}
		if _, ok := field(c, "y_ticks", 0).(float64); !ok {
			t.Errorf("y_ticks %v", c["y_ticks"])
		}
	})
	t.Run("categorical scale", func(t *testing.T) {
		c := chartOf(t, s, "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], ['A', 'B', 'C'])\nplt.show()")
		if c["x_scale"] != "linear" || c["y_scale"] != "categorical" || field(c, "elements", 0, "points", 2, 1) != "C" {
			t.Errorf("chart %v", c)
		}
	})
	t.Run("bar", func(t *testing.T) {
		c := chartOf(t, s, `
import matplotlib.pyplot as plt
plt.figure(figsize=(10, 6))
plt.bar(['Author A', 'Author B', 'Author C', 'Author D'], [100, 200, 300, 400])
plt.xlabel('Authors')
plt.ylabel('Number of Books Sold')
plt.title('Book Sales by Authors')
plt.show()`)
		if c["type"] != "bar" || c["x_label"] != "Authors" || c["y_label"] != "Number of Books Sold" || c["x_unit"] != nil {
			t.Errorf("chart %v", c)
		}
		if got := column(c, "label"); !slices.Equal(got, []any{"Author A", "Author B", "Author C", "Author D"}) {
			t.Errorf("labels %v", got)
		}
		if got := column(c, "value"); !slices.Equal(got, []any{100.0, 200.0, 300.0, 400.0}) {
			t.Errorf("values %v", got)
		}
		if got := column(c, "group"); got[0] != "Group 1" {
			t.Errorf("groups %v", got)
		}
	})
	t.Run("pie", func(t *testing.T) {
		c := chartOf(t, s, `
import matplotlib.pyplot as plt
fig, ax = plt.subplots(figsize=(8, 8))
ax.pie([90, 10], labels=["No", "No, in blue"], autopct='%1.1f%%', startangle=90)
plt.title('Will I wake up early tomorrow?')
plt.show()`)
		want := jsonOf(t, []map[string]any{{"label": "No", "angle": 324, "radius": 1}, {"label": "No, in blue", "angle": 36, "radius": 1}})
		if c["type"] != "pie" || c["title"] != "Will I wake up early tomorrow?" || !jsonEqual(c["elements"], want) {
			t.Errorf("chart %v", c)
		}
	})
	t.Run("box and whisker", func(t *testing.T) {
		c := chartOf(t, s, `
import matplotlib.pyplot as plt
data = {'Class A': [85, 90, 78, 92, 88], 'Class B': [95, 89, 76, 91, 84, 87], 'Class C': [75, 82, 88, 79, 86]}
fig, ax = plt.subplots(figsize=(10, 6))
ax.set_title('Exam Scores Distribution')
ax.set_xlabel('Class')
ax.set_ylabel('Score')
ax.boxplot(data.values(), labels=data.keys(), patch_artist=True)
plt.show()`)
		if c["type"] != "box_and_whisker" || c["x_label"] != "Class" || c["y_label"] != "Score" {
			t.Errorf("chart %v", c)
		}
		for k, want := range map[string][]any{
			"label":          {"Class A", "Class B", "Class C"},
			"min":            {78.0, 84.0, 75.0},
			"first_quartile": {85.0, 84.75, 79.0},
			"median":         {88.0, 88.0, 82.0},
			"third_quartile": {90.0, 90.5, 86.0},
			"max":            {92.0, 95.0, 88.0},
		} {
			if got := column(c, k); !slices.Equal(got, want) {
				t.Errorf("%s = %v, want %v", k, got, want)
			}
		}
		if got := column(c, "outliers"); !jsonEqual(got, jsonOf(t, [][]float64{{}, {76}, {}})) {
			t.Errorf("outliers %v", got)
		}
	})
	t.Run("superchart", func(t *testing.T) {
		c := chartOf(t, s, `
import matplotlib.pyplot as plt
import numpy as np
fig, axs = plt.subplots(1, 2, figsize=(10, 8))
fig.suptitle('Multiple Graphs Example', fontsize=16)
axs[0].plot(np.linspace(0, 10, 100), np.sin(np.linspace(0, 10, 100)), 'r')
axs[0].set_title('Sine Wave')
axs[0].grid(True)
axs[1].scatter(np.random.rand(5), np.random.rand(5), c='blue', label='Dataset 1')
axs[1].set_xlabel('X')
axs[1].set_title('Scatter Plot')
plt.show()`)
		if c["type"] != "superchart" || c["title"] != "Multiple Graphs Example" {
			t.Fatalf("chart %v", c)
		}
		if field(c, "elements", 0, "type") != "line" || field(c, "elements", 0, "title") != "Sine Wave" || field(c, "elements", 0, "x_label") != nil ||
			len(field(c, "elements", 0, "elements", 0, "points").([]any)) != 100 {
			t.Errorf("first %v", field(c, "elements", 0))
		}
		if field(c, "elements", 1, "type") != "scatter" || field(c, "elements", 1, "x_label") != "X" ||
			len(field(c, "elements", 1, "elements", 0, "points").([]any)) != 5 || field(c, "elements", 1, "elements", 0, "label") != "Dataset 1" {
			t.Errorf("second %v", field(c, "elements", 1))
		}
	})
	t.Run("unknown", func(t *testing.T) {
		c := chartOf(t, s, "import matplotlib.pyplot as plt\nfig, ax = plt.subplots()\nax.add_artist(plt.Circle((0, 0), 1))\nplt.title('Circles')\nplt.show()")
		if c["type"] != "unknown" || c["title"] != "Circles" || len(c["elements"].([]any)) != 0 {
			t.Errorf("chart %v", c)
		}
	})
	t.Run("NaN is null", func(t *testing.T) {
		c := chartOf(t, s, "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [1, float('nan'), 3])\nplt.show()")
		if p := field(c, "elements", 0, "points", 1); !jsonEqual(p, []any{2.0, nil}) {
			t.Errorf("point %v", p)
		}
	})
}

func jsonEqual(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}

// A DataFrame's result has its text, its HTML table and its data.
func TestCodeInterpreterDataFrame(t *testing.T) {
	s := startServer(t)
	needPython(t, s, "pandas")
	m := s.run(t, "import pandas as pd\npd.DataFrame({'a': [1, 2, 3], 'b': ['x', 'y', None]})").main()
	if m == nil || !strings.Contains(m.str("text"), "a") || !strings.Contains(m.str("html"), "<table") {
		t.Fatalf("main result %v", m)
	}
	if want := map[string]any{"a": []any{1.0, 2.0, 3.0}, "b": []any{"x", "y", nil}}; !jsonEqual(m["data"], want) {
		t.Errorf("data %v, want %v", m["data"], want)
	}
}

// Run as root, the server runs a context as the owner of its working
// directory; a missing one is a clear 400.
func TestCodeInterpreterContextUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the server switches users only when it runs as root")
	}
	s := startServer(t)
	// The context's user runs the same python: on a host whose python3 is
	// under /root (pyenv), no other user can.
	exe, err := exec.Command(s.python, "-c", "import sys; print(sys.executable)").Output()
	if err != nil {
		t.Fatal(err)
	}
	for d := filepath.Dir(strings.TrimSpace(string(exe))); d != "/"; d = filepath.Dir(d) {
		if st, err := os.Stat(d); err != nil || st.Mode().Perm()&0o001 == 0 {
			t.Skipf("the host's python3 (%s) is not reachable by other users (%s)", exe, d)
		}
	}
	parent, err := os.MkdirTemp("", "ci-cwd-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(parent) })
	if err := os.Chmod(parent, 0o755); err != nil {
		t.Fatal(err)
	}
	owned := filepath.Join(parent, "owned")
	if err := os.Mkdir(owned, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(owned, 4321, 4321); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		cwd string
		uid string
	}{{owned, "4321"}, {parent, "0"}} {
		var c contextInfo
		if code := s.call(t, http.MethodPost, "/contexts", map[string]any{"cwd": tc.cwd}, &c); code != http.StatusOK {
			t.Fatalf("POST /contexts cwd %s: %d", tc.cwd, code)
		}
		e := s.exec(t, map[string]any{"context_id": c.ID, "code": "import os\nopen('f', 'w').write('x')\nprint(os.getuid(), os.getgid(), os.environ['HOME'])\nos.getcwd()"})
		if em := e.err(); em != nil {
			t.Fatalf("cwd %s: %v", tc.cwd, em)
		}
		if got := strings.Fields(strings.Join(e.texts("stdout"), "")); len(got) != 3 || got[0] != tc.uid || got[1] != tc.uid {
			t.Errorf("cwd %s: uid, gid, HOME = %v, want uid %s", tc.cwd, got, tc.uid)
		}
		if m := e.main(); m == nil || m.str("text") != tc.cwd {
			t.Errorf("cwd %s: getcwd %v", tc.cwd, m)
		}
	}
	var body struct{ Error string }
	if code := s.call(t, http.MethodPost, "/contexts", map[string]any{"cwd": filepath.Join(parent, "missing")}, &body); code != http.StatusBadRequest ||
		!strings.Contains(body.Error, "does not exist") {
		t.Errorf("missing cwd: %d %q", code, body.Error)
	}
}
