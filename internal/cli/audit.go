package cli

import (
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/client"
	"github.com/airlockdev/airlock/internal/model"
)

func (a *app) auditCommand() *cobra.Command {
	var (
		q            client.AuditQuery
		since, until string
		all          bool
	)
	cmd := &cobra.Command{
		Use:   "audit",
		Short: "Show the audit log: who changed what, newest first",
		Long: "Show the audit log: one entry per request to a mutating route (who: key and\n" +
			"project; what: the route; which resource; the result), newest first, one page\n" +
			"at a time (--limit, --cursor) or all of them (--all). Filters combine.\n" +
			"--action takes a route or a prefix of one (\"DELETE\", \"POST /v1/sandboxes/{id}/pause\");\n" +
			"--since and --until an RFC 3339 time or a duration back from now (\"24h\").",
		Args: exactArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if q.Project != "" {
				if _, err := model.ParseProjectID(q.Project); err != nil {
					return usageErrorf("--project: %v", err)
				}
			}
			if q.Key != "" {
				if _, err := model.ParseAPIKeyID(q.Key); err != nil {
					return usageErrorf("--key: %v", err)
				}
			}
			if q.Sandbox != "" {
				if _, err := model.ParseSandboxID(q.Sandbox); err != nil {
					return usageErrorf("--sandbox: %v", err)
				}
			}
			if q.Result != "" && q.Result != "ok" && q.Result != "error" {
				if n, err := strconv.Atoi(q.Result); err != nil || n < 100 || n > 599 {
					return usageErrorf("--result must be ok, error or an HTTP status, not %q", q.Result)
				}
			}
			now := time.Now()
			var err error
			if q.Since, err = parseAuditTime("--since", since, now); err != nil {
				return err
			}
			if q.Until, err = parseAuditTime("--until", until, now); err != nil {
				return err
			}
			if q.Limit < 0 || q.Limit > 500 {
				return usageErrorf("--limit must be from 1 to 500")
			}
			c, err := a.client()
			if err != nil {
				return err
			}
			var list apiv1.AuditList
			if all {
				list, err = c.ListAllAudit(cmd.Context(), q)
			} else {
				list, err = c.ListAudit(cmd.Context(), q)
			}
			if err != nil {
				return err
			}
			if err := a.printer().auditList(list); err != nil {
				return err
			}
			if list.NextCursor != "" && a.flags.output == outputTable {
				a.progressf("more entries: add --cursor %s, or --all", list.NextCursor)
			}
			return nil
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&q.Project, "project", "", "only entries of this project")
	fs.StringVar(&q.Key, "key", "", "only entries made with this API key ID")
	fs.StringVar(&q.Action, "action", "", "only entries whose action (METHOD ROUTE) starts with this")
	fs.StringVar(&q.Resource, "resource", "", "only entries on (or creating) this resource ID")
	fs.StringVar(&q.Sandbox, "sandbox", "", "only entries concerning this sandbox (or made with its access token)")
	fs.StringVar(&q.Result, "result", "", "ok, error or an HTTP status")
	fs.StringVar(&since, "since", "", "only entries at or after this time (RFC 3339, or a duration such as 24h)")
	fs.StringVar(&until, "until", "", "only entries before this time (RFC 3339, or a duration such as 1h)")
	fs.IntVar(&q.Limit, "limit", 0, "page size, up to 500 (default: the server's)")
	fs.StringVar(&q.Cursor, "cursor", "", "start at this page (a previous listing's next cursor)")
	fs.BoolVar(&all, "all", false, "fetch every page")
	return cmd
}

// parseAuditTime parses --since or --until: an RFC 3339 time, or a
// duration back from now.
func parseAuditTime(flag, v string, now time.Time) (time.Time, error) {
	if v == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
		return t, nil
	}
	if d, err := time.ParseDuration(v); err == nil && d > 0 {
		return now.Add(-d), nil
	}
	return time.Time{}, usageErrorf("%s must be an RFC 3339 time (2026-01-02T15:04:05Z) or a positive duration (24h), not %q", flag, v)
}

func (p printer) auditList(l apiv1.AuditList) error {
	return p.print(l, func(w io.Writer) {
		fmt.Fprintln(w, "TIME\tWHO\tPROJECT\tACTION\tRESOURCE\tRESULT")
		for _, e := range l.Entries {
			who := e.KeyID
			if who == "" && e.TokenSandboxID != "" {
				who = "token:" + e.TokenSandboxID
			}
			res := e.ResourceKind
			if id := e.ResourceID + e.CreatedID; id != "" {
				res += " " + oneLine(id)
			}
			result := strconv.Itoa(e.Status)
			if e.ErrorCode != "" {
				result += " " + e.ErrorCode
			}
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", timeText(e.Time), orDash(who), orDash(e.ProjectID), e.Action, res, result)
		}
	})
}
