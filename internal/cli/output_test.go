package cli

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/apiv1"
)

var (
	t0      = time.Date(2026, 11, 30, 9, 5, 7, 123456789, time.UTC)
	t1      = t0.Add(90 * time.Second)
	digest  = "sha256:93169b62828e8752a010fbbce3d6e67f8c38cd180ef98448d8138a12d50dd7de"
	sampleS = apiv1.Sandbox{ID: "sbx_aaaaaaaaaaaaaaaaaaaaaaaaaa", Template: digest, CPUs: 2, MemoryMiB: 1024, DiskMiB: 4096,
		Env: map[string]string{"TOKEN": "s3cret", "A": "1"}, Metadata: map[string]string{"team": "ml", "app": "x\ty"},
		State: "failed", StateReason: "runsc: exit status 1\ndetails", Runtime: "runsc", CreatedAt: t0, UpdatedAt: t1}
	sampleOp = apiv1.Operation{ID: "op_bbbbbbbbbbbbbbbbbbbbbbbbbb", Kind: "create", State: "failed", SandboxID: sampleS.ID,
		Error: &apiv1.Error{Code: "runtime_error", Message: "runsc failed"}, Attempts: 3, CreatedAt: t0, UpdatedAt: t1, FinishedAt: &t1}
)

func render(t *testing.T, format string, f func(printer) error) string {
	t.Helper()
	var b bytes.Buffer
	if err := f(printer{w: &b, format: format}); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

func TestTableOutput(t *testing.T) {
	revoked := t1
	tests := []struct {
		name string
		f    func(printer) error
		want string
	}{
		{"sandbox", func(p printer) error { return p.sandbox(sampleS) }, "" +
			"ID:        sbx_aaaaaaaaaaaaaaaaaaaaaaaaaa\n" +
			"State:     failed\n" +
			"Reason:    runsc: exit status 1 details\n" +
			"Template:  " + digest + "\n" +
			"CPUs:      2\n" +
			"Memory:    1024 MiB\n" +
			"Disk:      4096 MiB\n" +
			"Runtime:   runsc\n" +
			"Env:       A, TOKEN\n" +
			"Metadata:  app=x y,team=ml\n" +
			"Idle:      never\n" +
			"Created:   2026-11-30T09:05:07Z\n" +
			"Updated:   2026-11-30T09:06:37Z\n"},
		{"sandbox list", func(p printer) error {
			return p.sandboxList(apiv1.SandboxList{Sandboxes: []apiv1.Sandbox{sampleS, {ID: "sbx_c", State: "running"}}})
		}, "" +
			"ID                              STATE    TEMPLATE             CPUS  MEMORY    DISK      CREATED               METADATA\n" +
			"sbx_aaaaaaaaaaaaaaaaaaaaaaaaaa  failed   sha256:93169b62828e  2     1024 MiB  4096 MiB  2026-11-30T09:05:07Z  app=x y,team=ml\n" +
			"sbx_c                           running  -                    0     0 MiB     0 MiB     -                     -\n"},
		{"operation", func(p printer) error { return p.operation(sampleOp) }, "" +
			"ID:        op_bbbbbbbbbbbbbbbbbbbbbbbbbb\n" +
			"Kind:      create\n" +
			"State:     failed\n" +
			"Sandbox:   sbx_aaaaaaaaaaaaaaaaaaaaaaaaaa\n" +
			"Attempts:  3\n" +
			"Error:     runsc failed (runtime_error)\n" +
			"Created:   2026-11-30T09:05:07Z\n" +
			"Updated:   2026-11-30T09:06:37Z\n" +
			"Finished:  2026-11-30T09:06:37Z\n"},
		{"templates", func(p printer) error {
			two := 2
			return p.templateList(apiv1.TemplateList{Templates: []apiv1.Template{
				{Digest: digest, Names: []string{"bb:latest", "default:latest"}, SizeBytes: 1982426, CreatedAt: t0, InUse: &two},
				{Digest: digest, SizeBytes: 10, CreatedAt: t0},
			}})
		}, "" +
			"TAGS                      DIGEST               SIZE     CREATED               IN USE\n" +
			"bb:latest,default:latest  " + shortDigest(digest) + "  1.9 MiB  2026-11-30T09:05:07Z  2\n" +
			"-                         " + shortDigest(digest) + "  10 B     2026-11-30T09:05:07Z  -\n"},
		{"template", func(p printer) error {
			one := 1
			return p.template(apiv1.Template{Digest: digest, Names: []string{"py:3.12"}, SizeBytes: 2048, CreatedAt: t0, InUse: &one,
				Config: &apiv1.TemplateConfig{Env: []string{"PATH=/bin", "A=b"}, WorkingDir: "/work", User: "app", Cmd: []string{"python3", "-i"}}})
		}, "" +
			"Digest:   " + digest + "\n" +
			"Tags:     py:3.12\n" +
			"Size:     2.0 KiB\n" +
			"Created:  2026-11-30T09:05:07Z\n" +
			"In use:   1 live sandbox(es)\n" +
			"Env:      PATH=/bin A=b\n" +
			"Workdir:  /work\n" +
			"User:     app\n" +
			"Cmd:      \"python3\" \"-i\"\n"},
		{"keys", func(p printer) error {
			return p.apiKeyList(apiv1.APIKeyList{Keys: []apiv1.APIKey{
				{ID: "key_a", ProjectID: "prj_a", Role: "admin", CreatedAt: t0},
				{ID: "key_b", ProjectID: "prj_a", Role: "member", Name: "ci\x1b[31m", CreatedAt: t0, RevokedAt: &revoked},
			}})
		}, "" +
			"ID     PROJECT  ROLE    NAME        CREATED               REVOKED\n" +
			"key_a  prj_a    admin   -           2026-11-30T09:05:07Z  -\n" +
			"key_b  prj_a    member  ci\\x1b[31m  2026-11-30T09:05:07Z  2026-11-30T09:06:37Z\n"},
		{"new key", func(p printer) error {
			return p.apiKey(apiv1.APIKey{ID: "key_a", ProjectID: "prj_a", Role: "member", Name: "ci", CreatedAt: t0, Token: "alk_secret"})
		}, "" +
			"ID:       key_a\n" +
			"Project:  prj_a\n" +
			"Role:     member\n" +
			"Name:     ci\n" +
			"Created:  2026-11-30T09:05:07Z\n" +
			"Token:    alk_secret\n"},
		{"projects", func(p printer) error {
			return p.projectList(apiv1.ProjectList{Projects: []apiv1.Project{{ID: "prj_a", Name: "default", CreatedAt: t0}}})
		}, "" +
			"ID     NAME     CREATED\n" +
			"prj_a  default  2026-11-30T09:05:07Z\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := render(t, outputTable, tt.f); got != tt.want {
				t.Errorf("got\n%s\nwant\n%s", got, tt.want)
			}
		})
	}
}

// JSON output is the apiv1 object exactly: it decodes back to what was
// printed, with the wire field names.
func TestJSONOutputIsTheWireObject(t *testing.T) {
	in := apiv1.SandboxWithOperation{Sandbox: sampleS, Operation: sampleOp}
	got := render(t, outputJSON, func(p printer) error { return p.sandboxWithOperation(in) })
	var back apiv1.SandboxWithOperation
	dec := json.NewDecoder(bytes.NewBufferString(got))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&back); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, in) {
		t.Errorf("round trip changed the object:\n%+v\n%+v", back, in)
	}
	want, _ := json.MarshalIndent(in, "", "  ")
	if got != string(want)+"\n" {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
	var raw map[string]map[string]any
	if err := json.Unmarshal([]byte(got), &raw); err != nil {
		t.Fatal(err)
	}
	if raw["sandbox"]["memory_mib"] != float64(1024) || raw["operation"]["finished_at"] != "2026-11-30T09:06:37.123456789Z" {
		t.Errorf("wire names or values lost: %v", raw)
	}
	// An empty list is [], as the server sends it, and the HTML characters
	// of values are not escaped.
	got = render(t, outputJSON, func(p printer) error {
		return p.projectList(apiv1.ProjectList{Projects: []apiv1.Project{{ID: "prj_a", Name: "<a&b>", CreatedAt: t0}}})
	})
	if !bytes.Contains([]byte(got), []byte(`"name": "<a&b>"`)) {
		t.Errorf("got %s", got)
	}
}

func TestFormatHelpers(t *testing.T) {
	for n, want := range map[int64]string{0: "0 B", 1023: "1023 B", 1024: "1.0 KiB", 1536: "1.5 KiB", 5 << 20: "5.0 MiB", 3 << 30: "3.0 GiB"} {
		if got := byteSize(n); got != want {
			t.Errorf("byteSize(%d) = %q, want %q", n, got, want)
		}
	}
	for in, want := range map[string]string{"a\nb": "a b", "a\tb": "a b", "\x1b]0;x\x07": `\x1b]0;x\x07`, "\u009b": `\x9b`, "héllo": "héllo"} {
		if got := oneLine(in); got != want {
			t.Errorf("oneLine(%q) = %q, want %q", in, got, want)
		}
	}
	if got := shortDigest("sha256:" + "0123456789abcdef"); got != "sha256:0123456789ab" {
		t.Errorf("shortDigest = %q", got)
	}
	if got := timeText(time.Time{}); got != "-" {
		t.Errorf("zero time = %q", got)
	}
}
