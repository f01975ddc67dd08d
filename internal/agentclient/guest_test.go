package agentclient_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/airlockdev/airlock/internal/agent"
	"github.com/airlockdev/airlock/internal/agentclient"
	"github.com/airlockdev/airlock/internal/agentproto"
)

// ConfigureGuest with an environment only (the rest would change this
// host): later processes see it, under their own env.
func TestConfigureGuestEnv(t *testing.T) {
	srv := newServer(t, agent.Options{})
	c := newClient(t, pipeDialer(t, srv).Dial)
	ctx := ctxT(t)
	if err := c.ConfigureGuest(ctx, agentproto.GuestConfig{Env: []string{"FOO=guest", "AGENT_VAR=guest", "BAR=guest"}}); err != nil {
		t.Fatal(err)
	}
	req := sh(newID(), `echo "$FOO $AGENT_VAR $BAR $HOME"`)
	req.Env = []string{"BAR=process"}
	res, err := c.Run(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(string(res.Stdout)); got != "guest guest process /root" {
		t.Fatalf("env %q, want guest-config env over the agent's, the process's env over both", got)
	}
	// Bad input is the agent's 400.
	err = c.ConfigureGuest(ctx, agentproto.GuestConfig{Entropy: []byte("short")})
	var ae *agentclient.Error
	if !errors.As(err, &ae) || ae.Code != agentproto.CodeInvalidRequest || ae.Status != 400 {
		t.Fatalf("short entropy: %v", err)
	}
}

func TestConfigureGuestUnsupported(t *testing.T) {
	c := newClient(t, recordedAgent(t, ""))
	err := c.ConfigureGuest(ctxT(t), agentproto.GuestConfig{Hostname: "x"})
	if !errors.Is(err, agentclient.ErrUnsupported) || !strings.Contains(err.Error(), agentproto.FeatureGuestConfig) {
		t.Fatalf("ConfigureGuest on an old agent: %v", err)
	}
}
