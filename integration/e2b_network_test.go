package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/airtest"
	"github.com/airlockdev/airlock/internal/template/recipe"
)

// TestE2BNetworkFakeInternet runs integration/e2b/parity-network.mjs with the
// real e2b SDK against a server inside the egress tests' fake internet
// (internal/egress/fakenet), with SMOKE_FAKE_INTERNET=1: the steps that
// TestE2BSDK leaves out (they need an internet) curl the fake internet's
// public addresses and names from E2B sandboxes created with
// allowInternetAccess, allowOut/denyOut (E2B's precedence) and changed
// live with updateNetwork, on gVisor and runc.
func TestE2BNetworkFakeInternet(t *testing.T) {
	airtest.RequireRoot(t)
	if _, err := exec.LookPath("mmdebstrap"); err != nil && os.Getenv("CI") == "true" {
		t.Fatal("the Debian default template needs mmdebstrap (scripts/install-deps.sh installs it)")
	}
	airtest.RequireBinary(t, "mmdebstrap")
	node, npm := requireNode(t, "the E2B network test")
	cache, err := airtest.TestCache()
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxFor(t, 40*time.Minute)
	modules := npmInstall(ctx, t, npm, cache, e2bDir, "e2b")
	fillRecipeCache(t, cache, recipe.Default(), t.TempDir())
	bins := build(t)
	for _, rt := range egressRuntimes() {
		t.Run(rt, func(t *testing.T) {
			airtest.RequireBinary(t, rt)
			n := newFakenet(t)
			s := newEgressServer(t, bins, rt, n, "--egress-default", "public",
				"--default-template", "debian", "--build-cache-dir", filepath.Join(cache, "recipe-cache-v1"))
			if stdout, stderr, code := s.cli(ctx, "run", "--", "true"); code != 0 {
				t.Fatalf("wait for the default template: exit %d\n%s\n%s", code, stdout, tail(stderr, 40))
			}
			key := e2bKey(ctx, t, s)
			work := stageScripts(t, e2bDir, modules)
			env := append(e2bEnv(key, s.url),
				"SMOKE_FAKE_INTERNET=1",
				"SMOKE_NET_A="+allowedAddr.String(), // allowed.example
				"SMOKE_NET_B="+sharedAddr.String(),
				"SMOKE_NET_C="+echoAddr.String(), // echo.example
				"SMOKE_NET_D="+blockedAddr.String(),
				"SMOKE_NET_CIDR=203.0.113.0/24",
				"SMOKE_NET_NAME="+allowedName,
				"SMOKE_NET_NAME2=echo.example",
			)
			// node runs in the fake host namespace, where the server's
			// loopback listener is.
			lw := &lineLog{t: t, prefix: "parity-network.mjs| "}
			cmd := n.Command(ctx, node, "parity-network.mjs")
			cmd.Dir, cmd.Env, cmd.Stdout, cmd.Stderr = work, env, lw, lw
			cmd.WaitDelay = 10 * time.Second
			start := time.Now()
			err := cmd.Run()
			lw.flush()
			if err != nil {
				t.Fatalf("parity-network.mjs against the fake internet (%s): %v", rt, err)
			}
			t.Logf("parity-network.mjs (%s) passed in %v", rt, time.Since(start).Round(time.Millisecond))
		})
	}
}
