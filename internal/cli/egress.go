package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/client"
	"github.com/airlockdev/airlock/internal/egress/policy"
	"github.com/airlockdev/airlock/internal/model"
)

// egressFlags are the egress policy flags of `sandbox create`, `run` and
// `egress set`.
type egressFlags struct {
	allow, deny, profiles, tlsExempt []string
	def                              string
}

func (f *egressFlags) register(fs *pflag.FlagSet, profileFlag, defaultFlag string) {
	fs.StringArrayVar(&f.allow, "allow", nil, "allow egress to HOST[:PORT], *.SUFFIX[:PORT] or CIDR[:PORT] (repeatable)")
	fs.StringArrayVar(&f.deny, "deny", nil, "deny egress to HOST[:PORT], *.SUFFIX[:PORT] or CIDR[:PORT] (repeatable; deny wins)")
	fs.StringArrayVar(&f.profiles, profileFlag, nil, "merge the rules of this egress profile (repeatable)")
	fs.StringArrayVar(&f.tlsExempt, "tls-exempt", nil, "relay TLS to this SNI name or CIDR without interception (repeatable)")
	fs.StringVar(&f.def, defaultFlag, "", "egress for what no rule names: public or none (default: the server's --egress-default)")
}

func (f *egressFlags) given() bool {
	return len(f.allow)+len(f.deny)+len(f.profiles)+len(f.tlsExempt) > 0 || f.def != ""
}

// policy checks the flags and adds them to p.
func (f *egressFlags) policy(p *apiv1.EgressPolicy) error {
	for _, l := range []struct {
		flag string
		in   []string
		out  *[]string
	}{{"--allow", f.allow, &p.Allow}, {"--deny", f.deny, &p.Deny}, {"--tls-exempt", f.tlsExempt, &p.TLSExempt}} {
		for _, s := range l.in {
			r, err := policy.ParseRule(s)
			if err != nil {
				return usageErrorf("%s: %w", l.flag, err)
			}
			*l.out = append(*l.out, r.String())
		}
	}
	for _, s := range f.profiles {
		n, err := policy.ParseProfileName(s)
		if err != nil {
			return usageErrorf("egress profile: %w", err)
		}
		p.Profiles = append(p.Profiles, string(n))
	}
	if f.def != "" {
		d, err := policy.ParseDefault(f.def)
		if err != nil {
			return usageErrorf("egress default: %w", err)
		}
		p.Default = string(d)
	}
	return nil
}

func (a *app) egressCommand() *cobra.Command {
	profile := group("profile", "List, show, set and remove egress profiles (set and rm need an admin key)",
		a.egressProfileListCommand(), a.egressProfileGetCommand(), a.egressProfileSetCommand(), a.egressProfileRmCommand())
	return group("egress", "Show and change a sandbox's egress policy, follow its decisions, explain one",
		a.egressGetCommand(), a.egressSetCommand(), a.egressLogCommand(), a.egressExplainCommand(), profile)
}

func (a *app) egressGetCommand() *cobra.Command {
	return argCommand(a, &cobra.Command{Use: "get SANDBOX", Short: "Show a sandbox's egress policy, as given and in force"},
		"SANDBOX", model.ParseSandboxID, (*client.Client).GetSandboxEgress, printer.sandboxEgress)
}

func (a *app) egressSetCommand() *cobra.Command {
	var (
		f    egressFlags
		file string
	)
	cmd := &cobra.Command{
		Use:   "set SANDBOX",
		Short: "Replace a sandbox's egress policy; a running sandbox follows it at once",
		Long: "Replace a sandbox's egress policy with the one given by --file (JSON: default,\n" +
			"allow, deny, profiles, tls_exempt; \"-\" reads stdin) and the flags, which add to it.\n" +
			"New connections follow the new policy, and open connections to destinations it\n" +
			"denies are cut. With neither, the policy becomes empty: the server's default.",
		Args: exactArgs("SANDBOX"),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := parseArg(model.ParseSandboxID, args[0])
			if err != nil {
				return err
			}
			var p apiv1.EgressPolicy
			if file != "" {
				if p, err = a.readPolicyFile(file); err != nil {
					return err
				}
			}
			if err := f.policy(&p); err != nil {
				return err
			}
			c, err := a.client()
			if err != nil {
				return err
			}
			out, err := c.SetSandboxEgress(cmd.Context(), id, p)
			if err != nil {
				return err
			}
			return a.printer().sandboxEgress(out)
		},
	}
	f.register(cmd.Flags(), "profile", "default")
	cmd.Flags().StringVar(&file, "file", "", "read the policy from this JSON file (\"-\": stdin)")
	return cmd
}

// readPolicyFile reads an egress policy as JSON, strictly.
func (a *app) readPolicyFile(path string) (apiv1.EgressPolicy, error) {
	var (
		b   []byte
		err error
	)
	if path == "-" {
		b, err = io.ReadAll(io.LimitReader(a.env.Stdin, 4<<20))
	} else {
		b, err = os.ReadFile(path)
	}
	if err != nil {
		return apiv1.EgressPolicy{}, fmt.Errorf("--file: %w", err)
	}
	var p apiv1.EgressPolicy
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return p, usageErrorf("--file %s: %w", path, err)
	}
	return p, nil
}

func (a *app) egressLogCommand() *cobra.Command {
	var (
		follow bool
		after  uint64
	)
	cmd := &cobra.Command{
		Use:   "log SANDBOX",
		Short: "Show a sandbox's egress decisions (--follow: until interrupted or the sandbox is deleted)",
		Args:  exactArgs("SANDBOX"),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, c, err := parseArgClient(a, model.ParseSandboxID, args[0])
			if err != nil {
				return err
			}
			p := a.printer()
			if !follow {
				list, err := c.EgressDecisions(cmd.Context(), id, after)
				if err != nil {
					return err
				}
				return p.decisionList(list)
			}
			if p.format == outputTable {
				fmt.Fprintln(p.w, decisionHeader)
			}
			return c.FollowEgressDecisions(cmd.Context(), id, after, func(ev client.DecisionEvent) error {
				if ev.Decision == nil {
					a.progressf("%d decisions were dropped before they could be read (the server keeps a bounded log)", ev.Dropped)
					return nil
				}
				return p.decisionLine(*ev.Decision)
			})
		},
	}
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "follow new decisions as they happen")
	cmd.Flags().Uint64Var(&after, "after", 0, "only decisions after this sequence number")
	return cmd
}

// parseHostPort parses HOST, HOST:PORT, IP, [IPv6]:PORT; no port is 443.
// HOST must be a DNS name or an IP address.
func parseHostPort(s string) (string, uint16, error) {
	host, port := s, uint64(443)
	if _, err := netip.ParseAddr(s); err != nil {
		h, portText, err := net.SplitHostPort(s)
		switch {
		case err == nil:
			if port, err = strconv.ParseUint(portText, 10, 16); err != nil {
				return "", 0, usageErrorf("%q: the port must be 0-65535", s)
			}
			host = h
		case strings.Contains(s, ":"):
			return "", 0, usageErrorf("%q: give HOST, HOST:PORT or [IPv6]:PORT", s)
		}
	}
	if a, err := netip.ParseAddr(host); err == nil {
		return a.String(), uint16(port), nil
	}
	name, err := policy.NormalizeName(host)
	if err != nil {
		return "", 0, usageErrorf("%w", err)
	}
	return name, uint16(port), nil
}

func (a *app) egressExplainCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "explain SANDBOX HOST[:PORT]",
		Short: "Explain what the sandbox's policy decides for a host and port (default 443; port 0: may the name be resolved)",
		Args:  exactArgs("SANDBOX", "HOST[:PORT]"),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := parseArg(model.ParseSandboxID, args[0])
			if err != nil {
				return err
			}
			host, port, err := parseHostPort(args[1])
			if err != nil {
				return err
			}
			c, err := a.client()
			if err != nil {
				return err
			}
			out, err := c.ExplainEgress(cmd.Context(), id, host, port)
			if err != nil {
				return err
			}
			return a.printer().explain(out)
		},
	}
}

func (a *app) egressProfileListCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List egress profiles",
		Args:  exactArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			l, err := c.ListEgressProfiles(cmd.Context())
			if err != nil {
				return err
			}
			return a.printer().profileList(l)
		},
	}
}

func (a *app) egressProfileGetCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "get NAME",
		Short: "Show an egress profile",
		Args:  exactArgs("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			name, c, err := parseArgClient(a, policy.ParseProfileName, args[0])
			if err != nil {
				return err
			}
			p, err := c.GetEgressProfile(cmd.Context(), string(name))
			if err != nil {
				return err
			}
			return a.printer().profile(p)
		},
	}
}

func (a *app) egressProfileSetCommand() *cobra.Command {
	var allow, deny, exempt []string
	cmd := &cobra.Command{
		Use:   "set NAME",
		Short: "Create or replace an egress profile (admin); sandboxes naming it follow at once",
		Args:  exactArgs("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			name, err := parseArg(policy.ParseProfileName, args[0])
			if err != nil {
				return err
			}
			f := egressFlags{allow: allow, deny: deny, tlsExempt: exempt}
			var p apiv1.EgressPolicy
			if err := f.policy(&p); err != nil {
				return err
			}
			c, err := a.client()
			if err != nil {
				return err
			}
			out, err := c.PutEgressProfile(cmd.Context(), string(name), apiv1.PutEgressProfileRequest{Allow: p.Allow, Deny: p.Deny, TLSExempt: p.TLSExempt})
			if err != nil {
				return err
			}
			return a.printer().profile(out)
		},
	}
	fs := cmd.Flags()
	fs.StringArrayVar(&allow, "allow", nil, "allow HOST[:PORT], *.SUFFIX[:PORT] or CIDR[:PORT] (repeatable)")
	fs.StringArrayVar(&deny, "deny", nil, "deny HOST[:PORT], *.SUFFIX[:PORT] or CIDR[:PORT] (repeatable)")
	fs.StringArrayVar(&exempt, "tls-exempt", nil, "relay TLS to this SNI name or CIDR without interception (repeatable)")
	return cmd
}

func (a *app) egressProfileRmCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "rm NAME",
		Short: "Remove an egress profile (admin); refused while a sandbox that is not deleted names it",
		Args:  exactArgs("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			name, c, err := parseArgClient(a, policy.ParseProfileName, args[0])
			if err != nil {
				return err
			}
			p, err := c.DeleteEgressProfile(cmd.Context(), string(name))
			if err != nil {
				return err
			}
			return a.printer().profile(p)
		},
	}
}

const decisionHeader = "SEQ\tTIME\tKIND\tHOST\tADDR\tPORT\tVERDICT\tRULE\tREASON"

func verdict(allowed bool) string {
	if allowed {
		return "allow"
	}
	return "deny"
}

func decisionRow(w io.Writer, d apiv1.EgressDecision) {
	port := "-"
	if d.Port != 0 {
		port = strconv.Itoa(int(d.Port))
	}
	fmt.Fprintf(w, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", d.Seq, timeText(d.Time), d.Kind, orDash(d.Host), orDash(d.Addr), port,
		verdict(d.Allowed), orDash(d.Rule), oneLine(d.Reason))
}

func (p printer) decisionList(l apiv1.EgressDecisionList) error {
	return p.print(l, func(w io.Writer) {
		fmt.Fprintln(w, decisionHeader)
		for _, d := range l.Decisions {
			decisionRow(w, d)
		}
		if l.Dropped > 0 {
			fmt.Fprintf(w, "(%d earlier decisions were dropped: the server keeps a bounded log)\n", l.Dropped)
		}
		if !l.Live {
			fmt.Fprintln(w, "(the sandbox's network is not up on this server: no decisions are kept)")
		}
	})
}

// decisionLine prints one followed decision: a JSON line, or a table row
// (not aligned with the others, as they come one by one).
func (p printer) decisionLine(d apiv1.EgressDecision) error {
	if p.format == outputJSON {
		b, err := json.Marshal(d)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(p.w, "%s\n", b)
		return err
	}
	decisionRow(p.w, d)
	return nil
}

func policyFields(w io.Writer, prefix string, p apiv1.EgressPolicy) {
	fmt.Fprintf(w, "%sDefault:\t%s\n", prefix, orDash(p.Default))
	fmt.Fprintf(w, "%sAllow:\t%s\n", prefix, orDash(strings.Join(p.Allow, ", ")))
	fmt.Fprintf(w, "%sDeny:\t%s\n", prefix, orDash(strings.Join(p.Deny, ", ")))
	fmt.Fprintf(w, "%sProfiles:\t%s\n", prefix, orDash(strings.Join(p.Profiles, ", ")))
	fmt.Fprintf(w, "%sTLS exempt:\t%s\n", prefix, orDash(strings.Join(p.TLSExempt, ", ")))
}

func (p printer) sandboxEgress(e apiv1.SandboxEgress) error {
	return p.print(e, func(w io.Writer) {
		policyFields(w, "", e.Policy)
		policyFields(w, "Effective ", e.Effective)
		fmt.Fprintf(w, "Live:\t%v\n", e.Live)
	})
}

func (p printer) explain(e apiv1.ExplainEgressResponse) error {
	return p.print(e, func(w io.Writer) {
		fmt.Fprintf(w, "Verdict:\t%s\n", verdict(e.Allowed))
		fmt.Fprintf(w, "Rule:\t%s\n", orDash(e.Rule))
		fmt.Fprintf(w, "Reason:\t%s\n", oneLine(e.Reason))
	})
}

func (p printer) profile(pr apiv1.EgressProfile) error {
	return p.print(pr, func(w io.Writer) {
		fmt.Fprintf(w, "Name:\t%s\n", pr.Name)
		fmt.Fprintf(w, "Allow:\t%s\n", orDash(strings.Join(pr.Allow, ", ")))
		fmt.Fprintf(w, "Deny:\t%s\n", orDash(strings.Join(pr.Deny, ", ")))
		fmt.Fprintf(w, "TLS exempt:\t%s\n", orDash(strings.Join(pr.TLSExempt, ", ")))
		fmt.Fprintf(w, "Updated:\t%s\n", timeText(pr.UpdatedAt))
	})
}

func (p printer) profileList(l apiv1.EgressProfileList) error {
	return p.print(l, func(w io.Writer) {
		fmt.Fprintln(w, "NAME\tALLOW\tDENY\tTLS EXEMPT\tUPDATED")
		for _, pr := range l.Profiles {
			fmt.Fprintf(w, "%s\t%d\t%d\t%d\t%s\n", pr.Name, len(pr.Allow), len(pr.Deny), len(pr.TLSExempt), timeText(pr.UpdatedAt))
		}
	})
}
