package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/airlockdev/airlock/internal/apiv1"
)

// Output formats of --output.
const (
	outputTable = "table"
	outputJSON  = "json"
)

// printer writes results in the chosen format: json prints the apiv1 object
// exactly as the API sent it; table prints a human view.
type printer struct {
	w      io.Writer
	format string
}

// print writes v as JSON, or calls table with a tab-aligned writer.
func (p printer) print(v any, table func(w io.Writer)) error {
	if p.format == outputJSON {
		enc := json.NewEncoder(p.w)
		enc.SetIndent("", "  ")
		enc.SetEscapeHTML(false)
		return enc.Encode(v)
	}
	tw := tabwriter.NewWriter(p.w, 0, 4, 2, ' ', 0)
	table(tw)
	return tw.Flush()
}

func (p printer) sandbox(sb apiv1.Sandbox) error {
	return p.print(sb, func(w io.Writer) { sandboxFields(w, sb) })
}

func (p printer) sandboxWithOperation(r apiv1.SandboxWithOperation) error {
	return p.print(r, func(w io.Writer) {
		sandboxFields(w, r.Sandbox)
		fmt.Fprintf(w, "Operation:\t%s (%s, %s)\n", r.Operation.ID, r.Operation.Kind, r.Operation.State)
		if r.Operation.Error != nil {
			fmt.Fprintf(w, "Operation error:\t%s\n", apiErrorText(*r.Operation.Error))
		}
	})
}

func sandboxFields(w io.Writer, sb apiv1.Sandbox) {
	fmt.Fprintf(w, "ID:\t%s\n", sb.ID)
	fmt.Fprintf(w, "State:\t%s\n", sb.State)
	if sb.StateReason != "" {
		fmt.Fprintf(w, "Reason:\t%s\n", oneLine(sb.StateReason))
	}
	snapshotField(w, sb.Snapshot)
	fmt.Fprintf(w, "Template:\t%s\n", sb.Template)
	fmt.Fprintf(w, "CPUs:\t%d\n", sb.CPUs)
	fmt.Fprintf(w, "Memory:\t%d MiB\n", sb.MemoryMiB)
	fmt.Fprintf(w, "Disk:\t%d MiB\n", sb.DiskMiB)
	if sb.Runtime != "" {
		fmt.Fprintf(w, "Runtime:\t%s\n", sb.Runtime)
	}
	if sb.Environment != "" {
		fmt.Fprintf(w, "Environment:\t%s\n", sb.Environment)
	}
	if sb.Source != "" {
		fmt.Fprintf(w, "Source:\t%s\n", sb.Source)
	}
	// Values of env may be secrets: the table shows names only.
	fmt.Fprintf(w, "Env:\t%s\n", orDash(strings.Join(sortedKeys(sb.Env), ", ")))
	fmt.Fprintf(w, "Metadata:\t%s\n", orDash(kvList(sb.Metadata)))
	if sb.Egress != nil {
		fmt.Fprintf(w, "Egress:\t%s\n", egressSummary(*sb.Egress))
	}
	timeoutFields(w, sb)
	fmt.Fprintf(w, "Created:\t%s\n", timeText(sb.CreatedAt))
	fmt.Fprintf(w, "Updated:\t%s\n", timeText(sb.UpdatedAt))
}

func (p printer) sandboxList(l apiv1.SandboxList) error {
	return p.print(l, func(w io.Writer) {
		fmt.Fprintln(w, "ID\tSTATE\tTEMPLATE\tCPUS\tMEMORY\tDISK\tCREATED\tMETADATA")
		for _, sb := range l.Sandboxes {
			fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%d MiB\t%d MiB\t%s\t%s\n", sb.ID, sb.State, shortDigest(sb.Template),
				sb.CPUs, sb.MemoryMiB, sb.DiskMiB, timeText(sb.CreatedAt), orDash(kvList(sb.Metadata)))
		}
	})
}

func (p printer) operation(op apiv1.Operation) error {
	return p.print(op, func(w io.Writer) { operationFields(w, op) })
}

func (p printer) operationResponse(r apiv1.OperationResponse) error {
	return p.print(r, func(w io.Writer) { operationFields(w, r.Operation) })
}

func operationFields(w io.Writer, op apiv1.Operation) {
	fmt.Fprintf(w, "ID:\t%s\n", op.ID)
	fmt.Fprintf(w, "Kind:\t%s\n", op.Kind)
	fmt.Fprintf(w, "State:\t%s\n", op.State)
	fmt.Fprintf(w, "Sandbox:\t%s\n", op.SandboxID)
	fmt.Fprintf(w, "Attempts:\t%d\n", op.Attempts)
	if op.Error != nil {
		fmt.Fprintf(w, "Error:\t%s\n", apiErrorText(*op.Error))
	}
	fmt.Fprintf(w, "Created:\t%s\n", timeText(op.CreatedAt))
	fmt.Fprintf(w, "Updated:\t%s\n", timeText(op.UpdatedAt))
	if op.FinishedAt != nil {
		fmt.Fprintf(w, "Finished:\t%s\n", timeText(*op.FinishedAt))
	}
}

func (p printer) template(t apiv1.Template) error {
	return p.print(t, func(w io.Writer) { templateFields(w, t) })
}

func (p printer) templateList(l apiv1.TemplateList) error {
	return p.print(l, func(w io.Writer) {
		fmt.Fprintln(w, templateListHeader)
		for _, t := range l.Templates {
			templateRow(w, t)
		}
	})
}

func (p printer) project(pr apiv1.Project) error {
	return p.print(pr, func(w io.Writer) {
		fmt.Fprintf(w, "ID:\t%s\n", pr.ID)
		fmt.Fprintf(w, "Name:\t%s\n", oneLine(pr.Name))
		fmt.Fprintf(w, "Created:\t%s\n", timeText(pr.CreatedAt))
	})
}

func (p printer) projectList(l apiv1.ProjectList) error {
	return p.print(l, func(w io.Writer) {
		fmt.Fprintln(w, "ID\tNAME\tCREATED")
		for _, pr := range l.Projects {
			fmt.Fprintf(w, "%s\t%s\t%s\n", pr.ID, oneLine(pr.Name), timeText(pr.CreatedAt))
		}
	})
}

func (p printer) apiKey(k apiv1.APIKey) error {
	return p.print(k, func(w io.Writer) {
		fmt.Fprintf(w, "ID:\t%s\n", k.ID)
		fmt.Fprintf(w, "Project:\t%s\n", k.ProjectID)
		fmt.Fprintf(w, "Role:\t%s\n", k.Role)
		fmt.Fprintf(w, "Name:\t%s\n", orDash(oneLine(k.Name)))
		fmt.Fprintf(w, "Created:\t%s\n", timeText(k.CreatedAt))
		if k.RevokedAt != nil {
			fmt.Fprintf(w, "Revoked:\t%s\n", timeText(*k.RevokedAt))
		}
		if k.Token != "" {
			fmt.Fprintf(w, "Token:\t%s\n", k.Token)
		}
	})
}

func (p printer) apiKeyList(l apiv1.APIKeyList) error {
	return p.print(l, func(w io.Writer) {
		fmt.Fprintln(w, "ID\tPROJECT\tROLE\tNAME\tCREATED\tREVOKED")
		for _, k := range l.Keys {
			revoked := "-"
			if k.RevokedAt != nil {
				revoked = timeText(*k.RevokedAt)
			}
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", k.ID, k.ProjectID, k.Role, orDash(oneLine(k.Name)), timeText(k.CreatedAt), revoked)
		}
	})
}

func (p printer) attachKeyList(l apiv1.AttachKeyList) error {
	return p.print(l, func(w io.Writer) {
		fmt.Fprintln(w, "KID\tCREATED\tACTIVE\tVERIFIES UNTIL")
		for _, k := range l.Keys {
			until := "-"
			if k.NotAfter != nil {
				until = timeText(*k.NotAfter)
			}
			fmt.Fprintf(w, "%s\t%s\t%t\t%s\n", k.ID, timeText(k.CreatedAt), k.Active, until)
		}
	})
}

// apiErrorText renders an apiv1.Error as "message (code)".
func apiErrorText(e apiv1.Error) string {
	if e.Code == "" {
		return oneLine(e.Message)
	}
	return oneLine(e.Message) + " (" + e.Code + ")"
}

// timeText renders a timestamp in UTC, to the second; "-" for the zero time.
func timeText(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

// shortDigest shortens "sha256:<64 hex>" to "sha256:<12 hex>" for tables.
func shortDigest(d string) string {
	if hex, ok := strings.CutPrefix(d, "sha256:"); ok && len(hex) > 12 {
		return "sha256:" + hex[:12]
	}
	return orDash(d)
}

// byteSize renders n bytes with a binary unit.
func byteSize(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 5; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// kvList renders a map as "k=v,k2=v2", sorted by key.
func kvList(m map[string]string) string {
	parts := make([]string, 0, len(m))
	for _, k := range sortedKeys(m) {
		parts = append(parts, k+"="+m[k])
	}
	return oneLine(strings.Join(parts, ","))
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// oneLine keeps a table cell on one line: newlines and tabs become spaces,
// and other control characters (terminal escape sequences from values that
// someone else chose) are shown as \xNN.
func oneLine(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch {
		case r == '\n' || r == '\r' || r == '\t':
			b.WriteByte(' ')
		case r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0):
			fmt.Fprintf(&b, "\\x%02x", r)
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// egressSummary is a one-line view of an egress policy.
func egressSummary(p apiv1.EgressPolicy) string {
	var parts []string
	if p.Default != "" {
		parts = append(parts, "default "+p.Default)
	}
	for _, l := range []struct {
		name  string
		items []string
	}{{"allow", p.Allow}, {"deny", p.Deny}, {"profiles", p.Profiles}, {"tls-exempt", p.TLSExempt}} {
		if len(l.items) > 0 {
			parts = append(parts, l.name+" "+strings.Join(l.items, ","))
		}
	}
	if len(parts) == 0 {
		return "server default"
	}
	return strings.Join(parts, "; ")
}
