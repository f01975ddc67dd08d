package pgtest

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

func TestMain(m *testing.M) { Main(m) }

func query(t *testing.T, dsn, q string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("connect %s: %v", dsn, err)
	}
	defer conn.Close(ctx)
	var out string
	if err := conn.QueryRow(ctx, q).Scan(&out); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return out
}

func TestDSNGivesFreshDatabases(t *testing.T) {
	a, b := DSN(t), DSN(t)
	if a == b {
		t.Fatalf("two calls returned the same DSN %s", a)
	}
	if v := query(t, a, "SHOW server_version_num"); v < "150000" || v >= "160000" {
		t.Errorf("server_version_num = %s, want PostgreSQL 15", v)
	}
	if v := query(t, a, "SHOW fsync"); v != "off" {
		t.Errorf("fsync = %s, want off", v)
	}
	dbA := query(t, a, "SELECT current_database()")
	dbB := query(t, b, "SELECT current_database()")
	if dbA == dbB {
		t.Errorf("both DSNs reach database %s", dbA)
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE TABLE x (v int)"); err != nil {
		t.Fatal(err)
	}
	if n := query(t, b, "SELECT count(*)::text FROM pg_tables WHERE tablename = 'x'"); n != "0" {
		t.Errorf("table created in one database is visible in the other")
	}
}

func TestDatabaseDroppedAfterTest(t *testing.T) {
	var name string
	t.Run("inner", func(t *testing.T) {
		name = query(t, DSN(t), "SELECT current_database()")
	})
	c, err := sharedCluster()
	if err != nil {
		t.Fatal(err)
	}
	n := query(t, c.DSN("postgres"), "SELECT count(*)::text FROM pg_database WHERE datname = '"+name+"'")
	if n != "0" {
		t.Errorf("database %s still exists after its test ended", name)
	}
}

func TestStartClusterStop(t *testing.T) {
	if err := Available(); err != nil {
		t.Skipf("skipping: %v", err)
	}
	ctx := context.Background()
	c, err := StartCluster(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Stop() })
	if c.Port() < 1024 {
		t.Errorf("port %d is not a high port", c.Port())
	}
	if _, err := os.Stat(filepath.Join(c.SocketDir(), ".s.PGSQL."+strconv.Itoa(c.Port()))); err != nil {
		t.Errorf("unix socket missing: %v", err)
	}
	name, err := c.CreateDatabase(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := query(t, c.DSN(name), "SELECT current_user"); got != Superuser {
		t.Errorf("current_user = %s", got)
	}
	if err := c.Stop(); err != nil {
		t.Fatalf("stop: %v", err)
	}
	if err := c.Stop(); err != nil {
		t.Fatalf("second stop: %v", err)
	}
	if _, err := os.Stat(c.Dir()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("cluster dir %s still exists after Stop (err %v)", c.Dir(), err)
	}
	if _, err := pgx.Connect(ctx, c.DSN("postgres")); err == nil {
		t.Errorf("cluster still accepts connections after Stop")
	}
}

// TestWatchdogStopsClusterWhenProcessDies starts a cluster in a child test
// process that is then SIGKILLed: the watchdog must stop the cluster and
// remove its directory.
func TestWatchdogStopsClusterWhenProcessDies(t *testing.T) {
	if os.Getenv("PGTEST_CHILD") == "1" {
		c, err := StartCluster(context.Background(), "")
		if err != nil {
			t.Fatal(err)
		}
		os.Stdout.WriteString(c.Dir() + "\n" + c.DSN("postgres") + "\n")
		time.Sleep(time.Minute) // killed long before
		return
	}
	if err := Available(); err != nil {
		t.Skipf("skipping: %v", err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestWatchdogStopsClusterWhenProcessDies$", "-test.v")
	cmd.Env = append(os.Environ(), "PGTEST_CHILD=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var dir, dsn string
	buf := make([]byte, 0, 4096)
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		chunk := make([]byte, 1024)
		n, err := out.Read(chunk)
		buf = append(buf, chunk[:n]...)
		if lines := splitLines(string(buf)); len(lines) >= 2 {
			for i, l := range lines {
				if filepath.IsAbs(l) && i+1 < len(lines) {
					dir, dsn = l, lines[i+1]
				}
			}
			if dir != "" {
				break
			}
		}
		if err != nil {
			break
		}
	}
	if dir == "" {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("child did not report its cluster; output:\n%s", buf)
	}
	query(t, dsn, "SELECT 'alive'")
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	for end := time.Now().Add(30 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
			if conn, err := pgx.Connect(context.Background(), dsn); err == nil {
				conn.Close(context.Background())
				t.Fatal("cluster dir removed but the server still accepts connections")
			}
			return
		}
	}
	t.Fatalf("cluster dir %s still exists 30s after its process was killed", dir)
}

func splitLines(s string) []string {
	var out []string
	for len(s) > 0 {
		i := 0
		for i < len(s) && s[i] != '\n' {
			i++
		}
		if i == len(s) {
			break // incomplete last line
		}
		out = append(out, s[:i])
		s = s[i+1:]
	}
	return out
}

func TestSocketDSNConnectsOverTheUnixSocket(t *testing.T) {
	dsn := SocketDSN(t)
	if v := query(t, dsn, "SELECT COALESCE(inet_client_addr()::text, 'unix')"); v != "unix" {
		t.Fatalf("%s connected from %s, want the unix socket", dsn, v)
	}
	if db := query(t, dsn, "SELECT current_database()"); db == "postgres" || db == "" {
		t.Fatalf("%s is not a fresh database (%q)", dsn, db)
	}
}
