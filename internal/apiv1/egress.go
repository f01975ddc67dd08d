package apiv1

import "time"

// EgressPolicy is a sandbox's egress policy as clients write it (the
// "egress" field of a create request, the body of PUT
// /v1/sandboxes/{id}/egress) and as an egress profile's rules. Rules are
// strings: "pypi.org", "*.github.com", "example.com:443", "203.0.113.7",
// "203.0.113.0/24:22", "[2001:db8::1]:443", "2001:db8::/32"; no port means
// any port. Default is "public" or "none" ("" or absent: the server's
// --egress-default). Profiles name operator-defined egress profiles whose
// rules are merged in. TLSExempt lists SNI names or CIDRs relayed on 443
// without interception.
type EgressPolicy struct {
	Default   string   `json:"default,omitempty"`
	Allow     []string `json:"allow,omitempty"`
	Deny      []string `json:"deny,omitempty"`
	Profiles  []string `json:"profiles,omitempty"`
	TLSExempt []string `json:"tls_exempt,omitempty"`
	// Headers are the sandbox's own request header rules: headers the
	// proxy sets on its intercepted HTTPS requests to each host, once
	// allowed. Values may hold "${secrets.NAME}", the project's secret
	// NAME's value at injection. Answers never carry values: only Names.
	Headers []HeaderRule `json:"headers,omitempty"`
}

// HeaderRule is one host's headers in EgressPolicy.Headers: Headers (name
// → value) when a client writes it, Names when the API answers.
type HeaderRule struct {
	Host    string            `json:"host"`
	Headers map[string]string `json:"headers,omitempty"`
	Names   []string          `json:"names,omitempty"`
}

// SandboxEgress is GET/PUT /v1/sandboxes/{id}/egress's answer.
type SandboxEgress struct {
	// Policy is the policy as given (at create or by the last PUT).
	Policy EgressPolicy `json:"policy"`
	// Effective is the policy in force: the profiles' rules merged in and
	// the default filled.
	Effective EgressPolicy `json:"effective"`
	// Live says whether the sandbox's network is up on this server, so
	// that the policy applies to its connections now; otherwise it applies
	// when the sandbox starts.
	Live bool `json:"live"`
}

// EgressProfile is an operator-defined set of rules (admin).
type EgressProfile struct {
	Name      string    `json:"name"`
	Allow     []string  `json:"allow,omitempty"`
	Deny      []string  `json:"deny,omitempty"`
	TLSExempt []string  `json:"tls_exempt,omitempty"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

// PutEgressProfileRequest is the body of PUT /v1/egress-profiles/{name}.
type PutEgressProfileRequest struct {
	Allow     []string `json:"allow,omitempty"`
	Deny      []string `json:"deny,omitempty"`
	TLSExempt []string `json:"tls_exempt,omitempty"`
}

// EgressProfileList is GET /v1/egress-profiles's answer, in name order.
type EgressProfileList struct {
	Profiles []EgressProfile `json:"profiles"`
}

// EgressDecision is one egress decision of a sandbox: a DNS query
// answered or refused, a connection or request allowed or denied, or an
// open connection cut by a policy change.
type EgressDecision struct {
	Seq     uint64    `json:"seq"`
	Time    time.Time `json:"time"`
	Kind    string    `json:"kind"` // dns, connect, tls, http, cut
	Host    string    `json:"host,omitempty"`
	Addr    string    `json:"addr,omitempty"`
	Port    uint16    `json:"port,omitempty"`
	Allowed bool      `json:"allowed"`
	Rule    string    `json:"rule"`
	Reason  string    `json:"reason"`
}

// EgressDecisionList is GET /v1/sandboxes/{id}/egress/decisions's answer
// without follow: the decisions after the requested sequence number that
// the server still holds, oldest first.
type EgressDecisionList struct {
	Decisions []EgressDecision `json:"decisions"`
	// Dropped counts decisions after the requested point that the
	// bounded log already overwrote.
	Dropped uint64 `json:"dropped"`
	// Live is false when the sandbox's network is not up on this server
	// (no decisions are kept for it).
	Live bool `json:"live"`
}

// SSE events of GET /v1/sandboxes/{id}/egress/decisions?follow=true.
const (
	EventEgressDecision = "decision" // data: EgressDecision; id: its seq
	EventEgressDropped  = "dropped"  // data: EgressDroppedEventData
	EventEgressEnd      = "end"      // data: {}: the sandbox is gone; the stream ends
)

// EgressDroppedEventData says how many decisions were overwritten before
// the follower read them.
type EgressDroppedEventData struct {
	Dropped uint64 `json:"dropped"`
}

// ExplainEgressRequest is the body of POST /v1/sandboxes/{id}/egress/explain.
// Host is a DNS name or an IP address; Port 0 asks whether the name may be
// resolved at all.
type ExplainEgressRequest struct {
	Host string `json:"host"`
	Port uint16 `json:"port,omitempty"`
}

// ExplainEgressResponse is the decision the sandbox's policy takes.
type ExplainEgressResponse struct {
	Allowed bool   `json:"allowed"`
	Rule    string `json:"rule"`
	Reason  string `json:"reason"`
}

// PutSecretRequest is the body of PUT /v1/secrets/{name}. The proxy sets
// header Header (default "Authorization") to Format (default "Bearer
// {value}" for Authorization, "{value}" for any other header) with
// {value} replaced by Value, on requests of the project's sandboxes to
// Hosts (exact names or "*.suffix") only.
type PutSecretRequest struct {
	Value string `json:"value"`
	// Hosts the proxy sends the secret to; none: only sandboxes' header
	// rules use it ("${secrets.NAME}").
	Hosts    []string          `json:"hosts,omitempty"`
	Header   string            `json:"header,omitempty"`
	Format   string            `json:"format,omitempty"`
	Metadata map[string]string `json:"metadata,omitempty"`
}

// Secret is a secret as the API shows it: never its value.
type Secret struct {
	// ID is "sec_…", the secret's for as long as it exists (created again
	// under the same name, it has another).
	ID     string   `json:"id"`
	Name   string   `json:"name"`
	Hosts  []string `json:"hosts"`
	Header string   `json:"header"`
	Format string   `json:"format"`
	// Placeholder is what sandboxes use in place of the value.
	Placeholder string            `json:"placeholder"`
	Metadata    map[string]string `json:"metadata"`
	// Version is 1 when created, one more at each replacement.
	Version   int64     `json:"version"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

// SecretList is GET /v1/secrets's answer, in name order.
type SecretList struct {
	Secrets []Secret `json:"secrets"`
}
