package qmp

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Status is the reply of query-status.
type Status struct {
	Running bool   `json:"running"`
	Status  string `json:"status"` // running, paused, prelaunch, inmigrate, postmigrate, shutdown, …
}

// Run states a driver meets (QAPI RunState).
const (
	StatusRunning     = "running"
	StatusPaused      = "paused"
	StatusPrelaunch   = "prelaunch"
	StatusInMigrate   = "inmigrate"
	StatusPostMigrate = "postmigrate"
	StatusShutdown    = "shutdown"
)

// QueryStatus asks for the VM's run state.
func (c *Client) QueryStatus(ctx context.Context) (Status, error) {
	var s Status
	err := c.Execute(ctx, "query-status", nil, &s)
	return s, err
}

// Stop pauses the vCPUs (QEMU emits STOP).
func (c *Client) Stop(ctx context.Context) error { return c.Execute(ctx, "stop", nil, nil) }

// Cont resumes the vCPUs (QEMU emits RESUME).
func (c *Client) Cont(ctx context.Context) error { return c.Execute(ctx, "cont", nil, nil) }

// Quit asks QEMU to exit. QEMU may close the socket before or after its
// reply; either counts as success, and Quit returns once the connection is
// closed (or ctx ends).
func (c *Client) Quit(ctx context.Context) error {
	err := c.Execute(ctx, "quit", nil, nil)
	if err != nil && !errors.Is(err, ErrClosed) {
		return err
	}
	select {
	case <-c.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("qmp quit: waiting for QEMU to close the socket: %w", context.Cause(ctx))
	}
}

// MigrationCapability is one entry of migrate-set-capabilities.
type MigrationCapability struct {
	Capability string `json:"capability"` // e.g. "events", "x-ignore-shared"
	State      bool   `json:"state"`
}

// MigrateSetCapabilities sets migration capabilities (before a migrate or a
// migrate-incoming). "events" makes QEMU emit MIGRATION events.
func (c *Client) MigrateSetCapabilities(ctx context.Context, caps ...MigrationCapability) error {
	return c.Execute(ctx, "migrate-set-capabilities",
		map[string]any{"capabilities": caps}, nil)
}

// Migrate starts an outgoing migration to uri (on QEMU 7.2 e.g.
// "exec:cat > FILE"; "file:" needs QEMU ≥ 8.2). It returns once QEMU has
// started it; WaitMigration follows it to the end.
func (c *Client) Migrate(ctx context.Context, uri string) error {
	return c.Execute(ctx, "migrate", map[string]any{"uri": uri}, nil)
}

// MigrateIncoming starts an incoming migration from uri on a QEMU started
// with -incoming defer (e.g. "exec:cat FILE").
func (c *Client) MigrateIncoming(ctx context.Context, uri string) error {
	return c.Execute(ctx, "migrate-incoming", map[string]any{"uri": uri}, nil)
}

// MigrationInfo is the part of query-migrate's reply a driver uses.
type MigrationInfo struct {
	Status    string `json:"status"` // none, setup, active, completed, failed, cancelled, …
	TotalTime int64  `json:"total-time"`
	Downtime  int64  `json:"downtime"`
	SetupTime int64  `json:"setup-time"`
	ErrorDesc string `json:"error-desc"`
	RAM       *struct {
		Transferred int64 `json:"transferred"`
		Total       int64 `json:"total"`
		Remaining   int64 `json:"remaining"`
	} `json:"ram"`
}

// Migration states.
const (
	MigrationNone      = "none"
	MigrationCompleted = "completed"
	MigrationFailed    = "failed"
	MigrationCancelled = "cancelled"
)

// QueryMigrate asks for the state of the current (or last) migration.
func (c *Client) QueryMigrate(ctx context.Context) (MigrationInfo, error) {
	var m MigrationInfo
	err := c.Execute(ctx, "query-migrate", nil, &m)
	return m, err
}

// MigrationError: a migration ended failed or cancelled.
type MigrationError struct{ Info MigrationInfo }

func (e *MigrationError) Error() string {
	if e.Info.ErrorDesc != "" {
		return fmt.Sprintf("qmp: migration %s: %s", e.Info.Status, e.Info.ErrorDesc)
	}
	return "qmp: migration " + e.Info.Status
}

// WaitMigration polls query-migrate every interval (default 5 ms) until the
// migration completes (nil) or fails or is cancelled (*MigrationError), or ctx
// ends.
func (c *Client) WaitMigration(ctx context.Context, interval time.Duration) (MigrationInfo, error) {
	if interval <= 0 {
		interval = 5 * time.Millisecond
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		m, err := c.QueryMigrate(ctx)
		if err != nil {
			return m, err
		}
		switch m.Status {
		case MigrationCompleted:
			return m, nil
		case MigrationFailed, MigrationCancelled:
			return m, &MigrationError{Info: m}
		}
		select {
		case <-t.C:
		case <-ctx.Done():
			return m, fmt.Errorf("qmp: waiting for migration (status %q): %w", m.Status, context.Cause(ctx))
		}
	}
}

// WaitStatus polls query-status every interval (default 5 ms) until done
// returns true for the state, or ctx ends.
func (c *Client) WaitStatus(ctx context.Context, interval time.Duration, done func(Status) bool) (Status, error) {
	if interval <= 0 {
		interval = 5 * time.Millisecond
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		s, err := c.QueryStatus(ctx)
		if err != nil || done(s) {
			return s, err
		}
		select {
		case <-t.C:
		case <-ctx.Done():
			return s, fmt.Errorf("qmp: waiting for run state (now %q): %w", s.Status, context.Cause(ctx))
		}
	}
}
