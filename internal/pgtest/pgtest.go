// Package pgtest starts throwaway PostgreSQL clusters for tests from the
// binaries of Debian's postgresql-15 package (/usr/lib/postgresql/15/bin).
//
// DSN(t) is the usual entry point: the first call in a test process starts
// one shared cluster (a few hundred milliseconds after the first), each call
// creates a fresh database on it and returns its DSN, and the database is
// dropped when t ends. The shared cluster is stopped and its files removed
// when the test process ends, in either of two ways:
//
//   - a package whose tests use DSN should wrap its TestMain with Main:
//     func TestMain(m *testing.M) { pgtest.Main(m) } — it stops the cluster
//     right after the tests;
//   - without it (and in any case after a crash, a panic, a timeout or
//     SIGKILL of the test binary) a watchdog process notices that the test
//     process is gone — it holds the read end of a pipe whose only writer is
//     the test process — and runs `pg_ctl stop -m immediate` and removes the
//     files itself.
//
// StartCluster starts a cluster that the caller owns, for tests that point a
// real `airlock server` process at PostgreSQL and must control its lifetime.
//
// The clusters are pgcluster's (initdb refuses to run as root: when the
// tests run as root, the cluster runs as the "postgres" system user). Tests
// skip with a message naming what is missing when the binaries or that user
// are absent.
package pgtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/airtest"

	"github.com/airlockdev/airlock/internal/pgcluster"
)

// BinDir is where Debian's postgresql-15 package installs the server binaries.
const BinDir = pgcluster.BinDir

// Superuser is the cluster's superuser role; it connects without a password
// (trust authentication on the unix socket and 127.0.0.1 only).
const Superuser = pgcluster.Superuser

// ErrUnavailable is wrapped when the host cannot run a cluster (missing
// binaries or system user); tests skip on it.
var ErrUnavailable = pgcluster.ErrUnavailable

// Cluster is a running throwaway PostgreSQL cluster.
type Cluster = pgcluster.Cluster

// Available returns nil if this host can start a cluster, or an error
// wrapping ErrUnavailable that says what is missing.
func Available() error { return pgcluster.Available() }

// StartCluster initializes and starts a cluster under dir ("" for a fresh
// directory, removed by Stop); see pgcluster.StartCluster.
func StartCluster(ctx context.Context, dir string) (*Cluster, error) {
	return pgcluster.StartCluster(ctx, dir)
}

// shared is the per-process cluster behind DSN. It is package state by
// necessity: one cluster is shared by every test of the process.
var shared struct {
	mu      sync.Mutex
	cluster *Cluster
	err     error
}

func sharedCluster() (*Cluster, error) {
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.cluster == nil && shared.err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		shared.cluster, shared.err = StartCluster(ctx, "")
	}
	return shared.cluster, shared.err
}

// DSN returns the DSN of a fresh, empty database on the process's shared
// cluster, starting the cluster on first use. The database is dropped when
// t ends (after t's own cleanups registered later, such as closing a store
// opened on it). It skips t when the host cannot run PostgreSQL.
func DSN(t testing.TB) string {
	t.Helper()
	c, name := freshDatabase(t)
	return c.DSN(name)
}

// SocketDSN is DSN over the shared cluster's unix socket (see
// Cluster.SocketDSN): for servers that run in network namespaces of their
// own.
func SocketDSN(t testing.TB) string {
	t.Helper()
	c, name := freshDatabase(t)
	return c.SocketDSN(name)
}

// freshDatabase creates a database on the shared cluster, dropped when t
// ends.
func freshDatabase(t testing.TB) (*Cluster, string) {
	t.Helper()
	airtest.SkipShort(t, "PostgreSQL")
	if err := Available(); err != nil {
		t.Skipf("skipping: %v", err)
	}
	c, err := sharedCluster()
	if err != nil {
		t.Fatalf("start PostgreSQL test cluster: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	name, err := c.CreateDatabase(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := c.DropDatabase(ctx, name); err != nil {
			t.Logf("pgtest: %v", err)
		}
	})
	return c, name
}

// Main runs the tests and then stops the shared cluster (if one was
// started) before exiting. Use it as: func TestMain(m *testing.M) { pgtest.Main(m) }.
func Main(m *testing.M) { os.Exit(Run(m)) }

// Run is Main without the exit: it runs the tests, stops the shared
// cluster and returns the exit code (for a TestMain that wraps it, e.g. in
// netnstest.MainFunc).
func Run(m *testing.M) int {
	code := m.Run()
	shared.mu.Lock()
	c := shared.cluster
	shared.cluster, shared.err = nil, errors.New("pgtest: shared cluster already stopped")
	shared.mu.Unlock()
	if c != nil {
		if err := c.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			if code == 0 {
				code = 1
			}
		}
	}
	return code
}
