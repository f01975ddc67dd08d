package api

import (
	"maps"
	"slices"
	"strings"
	"testing"
)

// tokenRoutes is every route a sandbox access token may call (of its own
// sandbox): what working inside the sandbox needs, which E2B's envd and
// traffic tokens stand for. A route joins this list by a decision, in
// review: adding sandboxToken to a route's access without it here fails
// TestRouteAttributes.
var tokenRoutes = []string{
	// The sandbox itself: read it, and wake or resume it to work in it.
	"GET /v1/sandboxes/{id}",
	"POST /v1/sandboxes/{id}/wake",
	"POST /v1/sandboxes/{id}/resume",
	// envd's process service.
	"POST /v1/sandboxes/{id}/commands",
	"GET /v1/sandboxes/{id}/processes",
	"GET /v1/sandboxes/{id}/processes/{process_id}",
	"POST /v1/sandboxes/{id}/processes/{process_id}/signal",
	"POST /v1/sandboxes/{id}/processes/{process_id}/attachments",
	// envd's filesystem service.
	"GET /v1/sandboxes/{id}/files/stat",
	"GET /v1/sandboxes/{id}/files/list",
	"POST /v1/sandboxes/{id}/files/mkdir",
	"POST /v1/sandboxes/{id}/files/metadata",
	"POST /v1/sandboxes/{id}/files/move",
	"POST /v1/sandboxes/{id}/files/remove",
	"POST /v1/sandboxes/{id}/files/transfers",
	// The traffic token: the sandbox's ports, every method the proxy carries.
	"GET " + portsPattern,
	"HEAD " + portsPattern,
	"POST " + portsPattern,
	"PUT " + portsPattern,
	"PATCH " + portsPattern,
	"DELETE " + portsPattern,
	"OPTIONS " + portsPattern,
}

// TestRouteAttributes walks the route table and checks what each entry's
// access states: a known level and flags; sandbox tokens only on member
// routes of their own sandbox, exactly the ones tokenRoutes lists (never
// an admin route, never what the owner decides: delete, timeouts, pause
// and suspend, egress); guest traffic only on the port proxy, which is
// then neither rate limited nor audited.
func TestRouteAttributes(t *testing.T) {
	t.Parallel()
	routes := newEnv(t).api.routes
	if len(routes) < 60 {
		t.Fatalf("only %d routes", len(routes))
	}
	want := map[string]bool{}
	for _, k := range tokenRoutes {
		want[k] = true
	}
	got := map[string]bool{}
	guest := 0
	for _, rt := range routes {
		key := rt.method + " " + rt.pattern
		switch rt.access.level() {
		case publicAccess, member, admin:
		default:
			t.Errorf("%s: unknown access level %d", key, rt.access.level())
		}
		if rt.has(volumeToken) && (rt.access.level() != member || !strings.HasPrefix(rt.pattern, "/v1/volumes/{id}/files/")) {
			t.Errorf("%s: a volume content token on a route that is not a member route under /v1/volumes/{id}/files/", key)
		}
		if rest := rt.access &^ levels &^ sandboxToken &^ guestTraffic &^ volumeToken; rest != 0 {
			t.Errorf("%s: unknown access flags %#x", key, int(rest))
		}
		if rt.has(sandboxToken) {
			got[key] = true
			if rt.access.level() != member {
				t.Errorf("%s: a sandbox token on a route of level %d (member only: never a public or admin route)", key, rt.access.level())
			}
			if rt.pattern != "/v1/sandboxes/{id}" && !strings.HasPrefix(rt.pattern, "/v1/sandboxes/{id}/") {
				t.Errorf("%s: a sandbox token on a route outside /v1/sandboxes/{id}", key)
			}
			if !want[key] {
				t.Errorf("%s: sandbox tokens may call it, but it is not in tokenRoutes", key)
			}
		}
		if rt.has(guestTraffic) != (rt.pattern == portsPattern) {
			t.Errorf("%s: guest traffic %v; only the port proxy carries it", key, rt.has(guestTraffic))
		}
		if rt.has(guestTraffic) {
			guest++
			if rt.audited() {
				t.Errorf("%s: guest traffic is audited", key)
			}
		}
		owners := []string{"DELETE /v1/sandboxes/{id}", "/timeout", "/pause", "/suspend", "/egress"}
		if rt.has(sandboxToken) && slices.ContainsFunc(owners, func(s string) bool { return key == s || strings.Contains(rt.pattern, s) }) {
			t.Errorf("%s: what the owner decides is open to sandbox tokens", key)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(want)) {
		if !got[k] {
			t.Errorf("%s is in tokenRoutes but its route does not take sandbox tokens (or does not exist)", k)
		}
	}
	if guest != 7 {
		t.Errorf("%d guest-traffic routes, want the port proxy's 7", guest)
	}
}
