package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/egress"
	"github.com/airlockdev/airlock/internal/egress/decisionlog"
	"github.com/airlockdev/airlock/internal/egress/policy"
	"github.com/airlockdev/airlock/internal/egress/secrets"
	"github.com/airlockdev/airlock/internal/eventstream"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/store"
	"github.com/airlockdev/airlock/internal/textclip"
)

// EgressState is the live egress state of the sandboxes this server hosts:
// the server passes its *egress.Registry. The API stores policies and then
// applies them to a registered sandbox (Sandbox.SetPolicy: new connections
// follow the new policy and open connections it now denies are cut), reads
// its decision log and asks it to explain. A sandbox that is not
// registered (not started yet, or hosted elsewhere) gets its stored policy
// when it starts: the server compiles it with store.CompileEgress.
type EgressState interface {
	ByID(id model.SandboxID) (*egress.Sandbox, bool)
	IDs() []model.SandboxID
	// GuestAddr is a registered sandbox's guest address, the only one
	// the port proxy (ports.go) dials.
	GuestAddr(id model.SandboxID) (netip.Addr, bool)
}

// egressDefault is the server's default for policies that name none.
func (a *API) egressDefault() policy.Default {
	if a.cfg.EgressDefault == "" {
		return policy.Public
	}
	return a.cfg.EgressDefault
}

// liveSandbox returns the registered egress state of a sandbox.
func (a *API) liveSandbox(id model.SandboxID) (*egress.Sandbox, bool) {
	if a.cfg.Egress == nil {
		return nil, false
	}
	return a.cfg.Egress.ByID(id)
}

// parseEgressPolicy parses a wire policy without header rules; errors
// wrap model.ErrInvalid.
func parseEgressPolicy(in apiv1.EgressPolicy) (policy.Spec, error) {
	if len(in.Headers) > 0 {
		return policy.Spec{}, fmt.Errorf("%w: header rules belong to a sandbox's policy", model.ErrInvalid)
	}
	b, err := json.Marshal(in)
	if err != nil {
		return policy.Spec{}, fmt.Errorf("encode egress policy: %w", err)
	}
	return policy.ParseSpec(b)
}

// parseSandboxEgress parses a sandbox's wire policy: its header rules are
// checked and sealed for the project (the server's secrets key; without
// one they are refused as secrets are).
func (a *API) parseSandboxEgress(project model.ProjectID, in apiv1.EgressPolicy) (policy.Spec, error) {
	rules := in.Headers
	in.Headers = nil
	spec, err := parseEgressPolicy(in)
	if err != nil || len(rules) == 0 {
		return spec, err
	}
	raw := make([]secrets.RawHeaderRule, len(rules))
	for i, r := range rules {
		if len(r.Names) > 0 {
			return policy.Spec{}, fmt.Errorf("%w: egress policy: headers[%d]: names is an answer's field; give headers (name → value)", model.ErrInvalid, i)
		}
		raw[i] = secrets.RawHeaderRule{Host: r.Host, Headers: r.Headers}
	}
	parsed, err := secrets.ParseHeaderRules(raw)
	if err != nil {
		return policy.Spec{}, fmt.Errorf("egress policy: %w", err)
	}
	sealer, err := a.sealer()
	if err != nil {
		return policy.Spec{}, err
	}
	if spec.Headers, err = sealer.SealHeaderRules(project, parsed); err != nil {
		return policy.Spec{}, err
	}
	return spec, nil
}

func ruleStrings(rules []policy.Rule) []string {
	if len(rules) == 0 {
		return nil
	}
	out := make([]string, len(rules))
	for i, r := range rules {
		out[i] = r.String()
	}
	return out
}

func egressPolicyOut(s policy.Spec) apiv1.EgressPolicy {
	out := apiv1.EgressPolicy{
		Default: string(s.Default), Allow: ruleStrings(s.Allow), Deny: ruleStrings(s.Deny), TLSExempt: ruleStrings(s.TLSExempt),
	}
	for _, p := range s.Profiles {
		out.Profiles = append(out.Profiles, string(p))
	}
	if s.Headers != nil {
		for _, h := range s.Headers.Hosts {
			out.Headers = append(out.Headers, apiv1.HeaderRule{Host: h.Host, Names: slices.Clone(h.Names)})
		}
	}
	return out
}

// compileEgress compiles a sandbox's policy with the stored profiles.
func (a *API) compileEgress(ctx context.Context, spec policy.Spec) (*policy.Policy, error) {
	p, err := store.CompileEgress(ctx, a.cfg.Store, spec, a.egressDefault())
	if err != nil {
		return nil, fmt.Errorf("compile egress policy: %w", err)
	}
	return p, nil
}

func (a *API) sandboxEgressOut(ctx context.Context, id model.SandboxID, spec policy.Spec) (apiv1.SandboxEgress, error) {
	p, err := a.compileEgress(ctx, spec)
	if err != nil {
		return apiv1.SandboxEgress{}, err
	}
	_, live := a.liveSandbox(id)
	return apiv1.SandboxEgress{Policy: egressPolicyOut(spec), Effective: egressPolicyOut(p.Spec()), Live: live}, nil
}

// getSandboxEgress: GET /v1/sandboxes/{id}/egress → 200 SandboxEgress.
func (a *API) getSandboxEgress(w http.ResponseWriter, r *http.Request, p principal) {
	ctx := r.Context()
	sb, err := a.sandboxOf(ctx, r, p)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	spec, err := a.cfg.Store.GetSandboxEgress(ctx, p.project, sb.ID)
	if err != nil {
		a.writeError(w, r, fmt.Errorf("get egress of %s: %w", sb.ID, err))
		return
	}
	out, err := a.sandboxEgressOut(ctx, sb.ID, spec)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, out)
}

// putSandboxEgress: PUT /v1/sandboxes/{id}/egress → 200 SandboxEgress. The
// policy is stored, then applied to the running sandbox.
func (a *API) putSandboxEgress(ctx context.Context, c *call[sandboxEgressBody]) (*reply, error) {
	spec, err := a.parseSandboxEgress(c.p.project, apiv1.EgressPolicy(c.in))
	if err != nil {
		return nil, err
	}
	compiled, err := a.compileEgress(ctx, spec)
	if err != nil {
		return nil, err
	}
	sb, err := a.sandboxOf(ctx, c.r, c.p)
	if err != nil {
		return nil, err
	}
	if err := a.cfg.Store.SetSandboxEgress(ctx, c.p.project, sb.ID, spec, c.now); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return nil, notFound("sandbox %s not found", sb.ID)
		}
		return nil, fmt.Errorf("set egress of %s: %w", sb.ID, err)
	}
	live, ok := a.liveSandbox(sb.ID)
	if ok {
		// What the store holds now (this PUT's policy, or a later one's):
		// concurrent writers cannot leave the live policy behind the store.
		if err := live.Reload(a.storedPolicy(ctx, sb.ID)); err != nil {
			a.log.WarnContext(ctx, "egress policy stored but not applied to the running sandbox", "sandbox", sb.ID, "err", err)
		}
	}
	a.log.InfoContext(ctx, "egress policy set", "sandbox", sb.ID, "live", ok, "by", c.p.keyID)
	out := apiv1.SandboxEgress{Policy: egressPolicyOut(spec), Effective: egressPolicyOut(compiled.Spec()), Live: ok}
	return idempotentReply(ctx, a, c, http.StatusOK, out)
}

// reapplyProfile reloads the policy of every live sandbox that names the
// profile, after the profile changed. It finishes even when the client
// goes away: the profile is committed, so every sandbox must follow.
func (a *API) reapplyProfile(ctx context.Context, name policy.ProfileName) {
	if a.cfg.Egress == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), profileReapplyTimeout)
	defer cancel()
	for _, id := range a.cfg.Egress.IDs() {
		spec, err := a.cfg.Store.GetSandboxEgressByID(ctx, id)
		if err != nil {
			a.log.WarnContext(ctx, "egress profile changed: cannot read a sandbox's policy", "sandbox", id, "profile", name, "err", err)
			continue
		}
		if !slices.Contains(spec.Profiles, name) {
			continue
		}
		sb, ok := a.cfg.Egress.ByID(id)
		if !ok {
			continue
		}
		if err := sb.Reload(a.storedPolicy(ctx, id)); err != nil {
			a.log.WarnContext(ctx, "egress profile changed: cannot apply a sandbox's policy", "sandbox", id, "profile", name, "err", err)
		}
	}
}

// profileReapplyTimeout bounds the reload of the sandboxes after a profile
// changed.
const profileReapplyTimeout = time.Minute

// storedPolicy loads a sandbox's policy as the store holds it, compiled
// with the current profiles.
func (a *API) storedPolicy(ctx context.Context, id model.SandboxID) func() (*policy.Policy, error) {
	return func() (*policy.Policy, error) {
		spec, err := a.cfg.Store.GetSandboxEgressByID(ctx, id)
		if err != nil {
			return nil, fmt.Errorf("egress policy of %s: %w", id, err)
		}
		return a.compileEgress(ctx, spec)
	}
}

// explainEgress: POST /v1/sandboxes/{id}/egress/explain → 200
// ExplainEgressResponse. It asks the running sandbox (which knows the
// host's own addresses) or else compiles the stored policy; it has no
// dialled address, so an allowance by name says that a connection also
// needs a live DNS binding. It changes nothing and is not logged.
func (a *API) explainEgress(ctx context.Context, c *call[apiv1.ExplainEgressRequest]) (*reply, error) {
	host := strings.TrimSpace(c.in.Host)
	if host == "" || len(host) > 300 {
		return nil, badRequest("host must be a DNS name or an IP address")
	}
	var name string
	addr, err := netip.ParseAddr(strings.Trim(host, "[]"))
	if err != nil {
		if name, err = policy.NormalizeName(host); err != nil {
			return nil, err
		}
	}
	sb, err := a.sandboxOf(ctx, c.r, c.p)
	if err != nil {
		return nil, err
	}
	live, ok := a.liveSandbox(sb.ID)
	if !ok {
		spec, err := a.cfg.Store.GetSandboxEgress(ctx, c.p.project, sb.ID)
		if err != nil {
			return nil, fmt.Errorf("get egress of %s: %w", sb.ID, err)
		}
		p, err := a.compileEgress(ctx, spec)
		if err != nil {
			return nil, err
		}
		// A registry of its own, holding just this policy, explains the
		// same way as the live one.
		live = egress.NewRegistry(egress.RegistryConfig{LogCapacity: 1, MaxNames: 1, Logger: a.log}).Add(sb.ID, netip.Addr{}, p)
	}
	d := live.Explain(name, addr, c.in.Port)
	out := apiv1.ExplainEgressResponse{Allowed: d.Allowed, Rule: d.Rule, Reason: d.Reason}
	rep, _, err := c.reply(http.StatusOK, out)
	return rep, err
}

// Limits of the decisions route.
const (
	decisionsPoll      = time.Second // how often a follower of a sandbox that is not live looks again
	decisionsKeepalive = 15 * time.Second
)

// egressDecisions: GET /v1/sandboxes/{id}/egress/decisions[?after=SEQ]
// [&follow=true] → 200 EgressDecisionList, or with follow an event stream
// of decision events (id: seq), dropped events when the bounded log
// overwrote decisions before they were sent, and an end event when the
// sandbox is deleted. A follower resumes after Last-Event-ID, or else
// ?after=SEQ, or else from the oldest decision held.
func (a *API) egressDecisions(w http.ResponseWriter, r *http.Request, p principal) {
	ctx := r.Context()
	follow, after, err := parseDecisionsQuery(r)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	sb, err := a.sandboxOf(ctx, r, p)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	if !follow {
		out := apiv1.EgressDecisionList{Decisions: []apiv1.EgressDecision{}}
		if live, ok := a.liveSandbox(sb.ID); ok {
			events, dropped := live.Log.Since(after)
			out.Live, out.Dropped = true, dropped
			for _, e := range events {
				out.Decisions = append(out.Decisions, decisionOut(e))
			}
		}
		writeJSON(w, http.StatusOK, out)
		return
	}
	a.followDecisions(ctx, w, sb, after)
}

func (a *API) followDecisions(ctx context.Context, w http.ResponseWriter, sb model.Sandbox, after uint64) {
	sse := eventstream.Start(w)
	if err := sse.Flush(); err != nil {
		return
	}
	lastSent := time.Now()
	for {
		live, ok := a.liveSandbox(sb.ID)
		if ok && live.Log.Last() < after {
			// A log newer than the resume point: the sandbox's network was
			// set up again (a restart) and its log began anew.
			after = 0
		}
		if ok {
			events, dropped := live.Log.Since(after)
			if dropped > 0 {
				if err := sse.Event("", apiv1.EventEgressDropped, apiv1.EgressDroppedEventData{Dropped: dropped}); err != nil {
					return
				}
			}
			for _, e := range events {
				if err := sse.Event(strconv.FormatUint(e.Seq, 10), apiv1.EventEgressDecision, decisionOut(e)); err != nil {
					return
				}
				after = e.Seq
			}
			if len(events) > 0 || dropped > 0 {
				if err := sse.Flush(); err != nil {
					return
				}
				lastSent = time.Now()
			}
		}
		if time.Since(lastSent) >= decisionsKeepalive {
			if err := sse.Comment("keepalive"); err != nil {
				return
			}
			lastSent = time.Now()
		}
		if a.cfg.Ready != nil {
			if err := a.cfg.Ready(ctx); err != nil {
				return // shutting down: the client reconnects
			}
		}
		waitCtx, cancel := context.WithTimeout(ctx, decisionsKeepalive)
		var err error
		if ok {
			err = live.Log.Wait(waitCtx, after)
		} else {
			t := time.NewTimer(decisionsPoll)
			select {
			case <-waitCtx.Done():
			case <-t.C:
			}
			t.Stop()
		}
		cancel()
		if ctx.Err() != nil {
			return
		}
		if errors.Is(err, decisionlog.ErrClosed) || !ok {
			// The sandbox left this server's registry, or never joined it:
			// end the stream once the sandbox is deleted.
			cur, gerr := a.cfg.Store.GetSandbox(ctx, sb.ProjectID, sb.ID)
			if gerr != nil || cur.State == model.StateDeleted || cur.State == model.StateDeleting {
				_ = sse.Event("", apiv1.EventEgressEnd, struct{}{})
				_ = sse.Flush()
				return
			}
			if errors.Is(err, decisionlog.ErrClosed) {
				// Removed but not deleted (restarting): poll until it returns.
				t := time.NewTimer(decisionsPoll)
				select {
				case <-ctx.Done():
					t.Stop()
					return
				case <-t.C:
				}
			}
		}
	}
}

func parseDecisionsQuery(r *http.Request) (follow bool, after uint64, err error) {
	for name, vals := range r.URL.Query() {
		if len(vals) != 1 {
			return false, 0, badRequest("give %s once", textclip.Bytes(name, maxEcho))
		}
		switch name {
		case "follow":
			if follow, err = strconv.ParseBool(vals[0]); err != nil {
				return false, 0, badRequest("follow must be true or false")
			}
		case "after":
			if after, err = parseSeq("after", vals[0]); err != nil {
				return false, 0, err
			}
		default:
			return false, 0, badRequest("unknown query parameter %q (give follow or after)", textclip.Bytes(name, maxEcho))
		}
	}
	if ids := r.Header.Values("Last-Event-ID"); len(ids) > 1 {
		return false, 0, badRequest("give Last-Event-ID once")
	} else if len(ids) == 1 && ids[0] != "" {
		if after, err = parseSeq("Last-Event-ID", ids[0]); err != nil {
			return false, 0, err
		}
	}
	return follow, after, nil
}

func parseSeq(what, v string) (uint64, error) {
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil || strings.TrimLeft(v, "0123456789") != "" {
		return 0, badRequest("%s must be a decision's sequence number, a non-negative integer", what)
	}
	return n, nil
}

func decisionOut(e decisionlog.Event) apiv1.EgressDecision {
	return apiv1.EgressDecision{Seq: e.Seq, Time: e.Time.UTC(), Kind: e.Kind, Host: e.Host, Addr: e.Addr, Port: e.Port,
		Allowed: e.Allowed, Rule: e.Rule, Reason: e.Reason}
}
