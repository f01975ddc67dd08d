// Package pgcluster starts throwaway PostgreSQL clusters from the binaries
// of Debian's postgresql-15 package (/usr/lib/postgresql/15/bin): initdb in
// a fresh directory, a free port on 127.0.0.1, fsync off. It is the part of
// pgtest that non-test code (`airlock bench nodes`) uses too.
//
// StartCluster starts a cluster that the caller owns; Stop stops it and
// removes its files. If the calling process dies first (a crash, SIGKILL),
// a watchdog process notices — it holds the read end of a pipe whose only
// writer is the caller — and runs `pg_ctl stop -m immediate` and removes
// the files itself.
//
// initdb refuses to run as root: when the caller runs as root, the cluster
// runs as the "postgres" system user. Available says what is missing when
// the binaries or that user are absent.
package pgcluster

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/jackc/pgx/v5"
)

// BinDir is where Debian's postgresql-15 package installs the server binaries.
const BinDir = "/usr/lib/postgresql/15/bin"

// Superuser is the cluster's superuser role; it connects without a password
// (trust authentication on the unix socket and 127.0.0.1 only).
const Superuser = "postgres"

// ErrUnavailable is wrapped when the host cannot run a cluster (missing
// binaries or system user).
var ErrUnavailable = errors.New("PostgreSQL cluster unavailable")

// Cluster is a running throwaway PostgreSQL cluster.
type Cluster struct {
	dir     string // root: data/, sock/ and postgres.log live here
	port    int
	owned   bool // dir was created by StartCluster and is removed by Stop
	watch   *exec.Cmd
	pipe    *os.File // write end of the watchdog's stdin; closing it stops the cluster
	stopMu  sync.Mutex
	stopped bool
	stopErr error
}

// credential says which user the cluster's processes run as: nil for the
// current user, or the postgres user's IDs when running as root.
func credential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("%w: running as root and there is no \"postgres\" system user to run initdb as (%v); install Debian's postgresql-15 package", ErrUnavailable, err)
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err1 != nil || err2 != nil {
		return nil, fmt.Errorf("postgres user has non-numeric IDs %q/%q", u.Uid, u.Gid)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}, nil
}

// Available returns nil if this host can start a cluster, or an error
// wrapping ErrUnavailable that says what is missing.
func Available() error {
	for _, b := range []string{"initdb", "pg_ctl", "postgres"} {
		if _, err := os.Stat(filepath.Join(BinDir, b)); err != nil {
			return fmt.Errorf("%w: %s not found in %s (install Debian's postgresql-15 package)", ErrUnavailable, b, BinDir)
		}
	}
	_, err := credential()
	return err
}

// command builds a command that runs as the cluster's user in its own
// session, so signals aimed at the test's process group do not reach it.
func command(cred *syscall.Credential, name string, args ...string) *exec.Cmd {
	cmd := exec.Command(name, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Credential: cred}
	cmd.Env = append(os.Environ(), "LC_ALL=C", "LANG=C")
	return cmd
}

func run(cmd *exec.Cmd) error {
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s: %w\n%s", strings.Join(cmd.Args, " "), err, strings.TrimSpace(out.String()))
	}
	return nil
}

// freePort asks the kernel for an unused TCP port on 127.0.0.1.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// StartCluster initializes and starts a cluster under dir ("" for a fresh
// directory under os.TempDir(), removed by Stop). A given dir must be
// reachable by the postgres user when running as root (t.TempDir() is not:
// its parent is private to root); StartCluster makes it owned by that user
// and Stop removes what it created inside (data/, sock/, postgres.log). The
// cluster listens on a unix socket in dir/sock and on 127.0.0.1 on a free
// high port, with fsync off. Stop it with Stop; if the calling process dies
// first, a watchdog stops it and removes the files.
func StartCluster(ctx context.Context, dir string) (*Cluster, error) {
	if err := Available(); err != nil {
		return nil, err
	}
	cred, _ := credential()
	c := &Cluster{dir: dir}
	if dir == "" {
		d, err := os.MkdirTemp("", "airlock-pg-")
		if err != nil {
			return nil, fmt.Errorf("pgcluster: %w", err)
		}
		c.dir, c.owned = d, true
	}
	fail := func(err error) (*Cluster, error) {
		c.cleanupFiles()
		return nil, err
	}
	if cred != nil {
		if err := os.Chown(c.dir, int(cred.Uid), int(cred.Gid)); err != nil {
			return fail(fmt.Errorf("pgcluster: chown %s to postgres: %w", c.dir, err))
		}
	}
	if err := os.Chmod(c.dir, 0o700); err != nil {
		return fail(fmt.Errorf("pgcluster: %w", err))
	}
	data, sock := filepath.Join(c.dir, "data"), filepath.Join(c.dir, "sock")
	if err := run(command(cred, "/bin/mkdir", "-m", "0700", sock)); err != nil {
		return fail(fmt.Errorf("pgcluster: %w", err))
	}
	if err := run(command(cred, filepath.Join(BinDir, "initdb"), "-D", data, "-U", Superuser,
		"--auth=trust", "--encoding=UTF8", "--locale=C", "--no-sync", "--no-instructions")); err != nil {
		return fail(fmt.Errorf("pgcluster: initdb: %w", err))
	}
	if err := c.startWatchdog(cred, data); err != nil {
		return fail(err)
	}
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		port, err := freePort()
		if err != nil {
			lastErr = fmt.Errorf("pgcluster: free port: %w", err)
			break
		}
		if err := c.start(ctx, cred, data, sock, port); err != nil {
			lastErr = err
			continue // most likely someone took the port meanwhile
		}
		return c, nil
	}
	c.stopWatchdog() // stops whatever started and removes the files
	return nil, lastErr
}

// start writes the settings for port and runs pg_ctl start.
func (c *Cluster) start(ctx context.Context, cred *syscall.Credential, data, sock string, port int) error {
	conf := fmt.Sprintf(`
listen_addresses = '127.0.0.1'
port = %d
unix_socket_directories = '%s'
fsync = off
synchronous_commit = off
full_page_writes = off
max_connections = 300
shared_buffers = 32MB
log_min_messages = warning
`, port, sock)
	confPath := filepath.Join(data, "postgresql.auto.conf")
	if err := run(command(cred, "/bin/sh", "-c", `printf '%s' "$1" > "$2"`, "sh", conf, confPath)); err != nil {
		return fmt.Errorf("pgcluster: write settings: %w", err)
	}
	logFile := filepath.Join(c.dir, "postgres.log")
	cmd := command(cred, filepath.Join(BinDir, "pg_ctl"), "start", "-w", "-t", "60", "-D", data, "-l", logFile)
	if err := run(cmd); err != nil {
		log, _ := os.ReadFile(logFile)
		return fmt.Errorf("pgcluster: pg_ctl start: %w\n%s", err, log)
	}
	c.port = port
	conn, err := pgx.Connect(ctx, c.DSN("postgres"))
	if err != nil {
		_ = run(command(cred, filepath.Join(BinDir, "pg_ctl"), "stop", "-D", data, "-m", "immediate", "-w"))
		return fmt.Errorf("pgcluster: connect to fresh cluster: %w", err)
	}
	conn.Close(ctx)
	return nil
}

// watchdogScript waits for EOF on stdin (the test process closed the pipe or
// died), then stops the cluster and removes its files. $1 pg_ctl, $2 data
// dir, $3 cluster dir, $4 "1" if the cluster dir itself is to be removed.
const watchdogScript = `cat >/dev/null
"$1" stop -D "$2" -m immediate -w -t 60 >/dev/null 2>&1
rm -rf "$3/data" "$3/sock" "$3/postgres.log"
if [ "$4" = 1 ]; then rmdir "$3" 2>/dev/null; fi
exit 0`

func (c *Cluster) startWatchdog(cred *syscall.Credential, data string) error {
	r, w, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("pgcluster: pipe: %w", err)
	}
	owned := "0"
	if c.owned {
		owned = "1"
	}
	cmd := command(cred, "/bin/sh", "-c", watchdogScript, "pgcluster-watchdog",
		filepath.Join(BinDir, "pg_ctl"), data, c.dir, owned)
	cmd.Stdin = r
	if err := cmd.Start(); err != nil {
		r.Close()
		w.Close()
		return fmt.Errorf("pgcluster: start watchdog: %w", err)
	}
	r.Close() // only the watchdog holds the read end now
	c.watch, c.pipe = cmd, w
	return nil
}

// stopWatchdog closes the pipe and waits for the watchdog to stop the
// cluster and remove its files.
func (c *Cluster) stopWatchdog() error {
	if c.pipe == nil {
		return nil
	}
	c.pipe.Close()
	err := c.watch.Wait()
	c.pipe, c.watch = nil, nil
	if err != nil {
		return fmt.Errorf("pgcluster: watchdog: %w", err)
	}
	return nil
}

// cleanupFiles removes what StartCluster created when it fails before the
// watchdog runs.
func (c *Cluster) cleanupFiles() {
	if c.owned {
		os.RemoveAll(c.dir)
		return
	}
	for _, p := range []string{"data", "sock", "postgres.log"} {
		os.RemoveAll(filepath.Join(c.dir, p))
	}
}

// Port is the TCP port on 127.0.0.1.
func (c *Cluster) Port() int { return c.port }

// Dir is the cluster's root directory.
func (c *Cluster) Dir() string { return c.dir }

// SocketDir is the directory of the cluster's unix socket.
func (c *Cluster) SocketDir() string { return filepath.Join(c.dir, "sock") }

// SocketDSN returns a URL that connects as the superuser to database over
// the cluster's unix socket. A unix socket is reached by its path, so the
// URL works from every network namespace of the machine (a process in a
// namespace of its own cannot reach the cluster's 127.0.0.1).
func (c *Cluster) SocketDSN(database string) string {
	q := url.Values{}
	q.Set("host", c.SocketDir())
	q.Set("port", strconv.Itoa(c.port)) // names the socket file (.s.PGSQL.PORT)
	q.Set("user", Superuser)
	q.Set("sslmode", "disable")
	u := url.URL{Scheme: "postgres", Path: "/" + database, RawQuery: q.Encode()}
	return u.String()
}

// DSN returns a URL that connects as the superuser to database over TCP.
func (c *Cluster) DSN(database string) string {
	u := url.URL{
		Scheme:   "postgres",
		User:     url.User(Superuser),
		Host:     net.JoinHostPort("127.0.0.1", strconv.Itoa(c.port)),
		Path:     "/" + database,
		RawQuery: "sslmode=disable",
	}
	return u.String()
}

// CreateDatabase creates a database with a fresh random name and returns
// its name. It copies template1 file by file (STRATEGY FILE_COPY), which
// with fsync off is several times faster than PostgreSQL 15's default.
func (c *Cluster) CreateDatabase(ctx context.Context) (string, error) {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	name := "t_" + hex.EncodeToString(b[:])
	conn, err := pgx.Connect(ctx, c.DSN("postgres"))
	if err != nil {
		return "", fmt.Errorf("pgcluster: connect: %w", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()+" STRATEGY FILE_COPY"); err != nil {
		return "", fmt.Errorf("pgcluster: create database %s: %w", name, err)
	}
	return name, nil
}

// DropDatabase drops a database, disconnecting its sessions.
func (c *Cluster) DropDatabase(ctx context.Context, name string) error {
	conn, err := pgx.Connect(ctx, c.DSN("postgres"))
	if err != nil {
		return fmt.Errorf("pgcluster: connect: %w", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
		return fmt.Errorf("pgcluster: drop database %s: %w", name, err)
	}
	return nil
}

// Stop stops the cluster immediately (pg_ctl stop -m immediate) and removes
// its files. It is safe to call more than once.
func (c *Cluster) Stop() error {
	c.stopMu.Lock()
	defer c.stopMu.Unlock()
	if !c.stopped {
		c.stopped = true
		c.stopErr = c.stopWatchdog()
	}
	return c.stopErr
}
