package testenv

import (
	"context"
	"database/sql"
	"errors"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/uptrace/bun/driver/pgdriver"
)

// Postgres is a PostgreSQL server of one test's own: a cluster initialised in
// a temporary directory, listening on a free loopback port, with trust
// authentication. Unlike the machine's shared server (PostgresURL), it can be
// stopped and started again on the same data: a database outage without
// touching anyone else's databases.
type Postgres struct {
	// URL is the database "mailyard" on the server, for MAILYARD_DATABASE_URL.
	URL string
	// Addr is the server's host:port.
	Addr string

	t      testing.TB
	bin    string // the directory holding postgres and initdb
	data   string
	socket string
	cred   *syscall.Credential // the postgres OS user when the test runs as root
	output *SyncBuffer
	cmd    *exec.Cmd
	done   chan struct{}
}

// StartPostgres initialises a cluster with initdb (the highest version under
// /usr/lib/postgresql, or initdb on PATH), starts it, creates the database
// "mailyard" and returns. The server and its files go when the test ends. As
// root it runs as the postgres OS user, since PostgreSQL refuses to run as
// root. Without the binaries the test is skipped, except under CI (CI set),
// where it fails.
func StartPostgres(t testing.TB) *Postgres {
	t.Helper()
	bin, err := findPostgresBin()
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	p := &Postgres{t: t, bin: bin, output: &SyncBuffer{}}
	// Not t.TempDir(): its parent is root's and closed to the postgres user.
	dir, err := os.MkdirTemp("", "mailyard-postgres-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			t.Fatalf("PostgreSQL refuses to run as root and there is no postgres user to run it as: %v", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		p.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}
		if err := os.Chown(dir, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
	p.data, p.socket = filepath.Join(dir, "data"), dir
	initdb := p.command("initdb", "-D", p.data, "-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-sync", "--locale=C")
	if out, err := initdb.CombinedOutput(); err != nil {
		t.Fatalf("initdb: %v\n%s", err, out)
	}
	p.Addr = FreeAddr(t)
	t.Cleanup(func() {
		p.Stop()
		if t.Failed() {
			t.Logf("end of PostgreSQL's log:\n%s", tail(p.output.String(), 8<<10))
		}
	})
	p.Start()

	admin := p.url("postgres")
	db := sql.OpenDB(pgdriver.NewConnector(pgdriver.WithDSN(admin)))
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := db.ExecContext(ctx, "CREATE DATABASE mailyard"); err != nil {
		t.Fatalf("create database: %v", err)
	}
	p.URL = p.url("mailyard")
	return p
}

func (p *Postgres) url(database string) string {
	return "postgres://postgres@" + p.Addr + "/" + database + "?sslmode=disable"
}

// command is one of the PostgreSQL binaries, run as the postgres user if the
// test runs as root.
func (p *Postgres) command(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(filepath.Join(p.bin, name), args...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "LC_ALL=C"}
	cmd.Dir = p.socket
	// Killed with its parent, so a crashed test leaves no server behind.
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: p.cred, Pdeathsig: syscall.SIGKILL}
	return cmd
}

// Start starts the server (again, after Stop) on the same data and port, and
// waits until it accepts connections.
func (p *Postgres) Start() {
	p.t.Helper()
	if p.cmd != nil {
		p.t.Fatal("PostgreSQL is running")
	}
	host, port, _ := net.SplitHostPort(p.Addr)
	cmd := p.command("postgres", "-D", p.data, "-h", host, "-p", port, "-k", p.socket,
		// A throwaway cluster: durability buys nothing.
		"-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
		"-c", "max_connections=200", "-c", "log_min_messages=warning")
	cmd.Stdout, cmd.Stderr = p.output, p.output
	if err := cmd.Start(); err != nil {
		p.t.Fatal(err)
	}
	p.cmd, p.done = cmd, make(chan struct{})
	go func() { _ = cmd.Wait(); close(p.done) }()

	admin := p.url("postgres")
	deadline := time.Now().Add(time.Minute)
	for {
		err := p.ping(admin)
		if err == nil {
			return
		}
		select {
		case <-p.done:
			p.cmd = nil
			p.t.Fatalf("PostgreSQL exited while starting: %v\n%s", err, tail(p.output.String(), 4<<10))
		default:
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("PostgreSQL at %s did not accept connections within a minute: %v", p.Addr, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (p *Postgres) ping(dsn string) error {
	db := sql.OpenDB(pgdriver.NewConnector(pgdriver.WithDSN(dsn), pgdriver.WithTimeout(2*time.Second)))
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	return db.PingContext(ctx)
}

// Stop shuts the server down as an operator's restart does (fast shutdown:
// open transactions are rolled back, clients are disconnected) and waits for
// it; the data stays. Between Stop and Start, connections are refused.
func (p *Postgres) Stop() {
	if p.cmd == nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
	p.cmd = nil
}

// Output is what the server logged so far.
func (p *Postgres) Output() string { return p.output.String() }

// findPostgresBin is the directory of the newest PostgreSQL's server binaries.
func findPostgresBin() (string, error) {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return pgVersion(dirs[i]) > pgVersion(dirs[j]) })
	for _, d := range dirs {
		if isExecutable(filepath.Join(d, "initdb")) && isExecutable(filepath.Join(d, "postgres")) {
			return d, nil
		}
	}
	if initdb, err := exec.LookPath("initdb"); err == nil {
		if real, err := filepath.EvalSymlinks(initdb); err == nil {
			d := filepath.Dir(real)
			if isExecutable(filepath.Join(d, "postgres")) {
				return d, nil
			}
		}
	}
	return "", errors.New("no PostgreSQL server binaries (initdb, postgres) under /usr/lib/postgresql/*/bin or on PATH; apt-get install -y postgresql")
}

func pgVersion(binDir string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return v
}

func isExecutable(path string) bool {
	st, err := os.Stat(path)
	return err == nil && !st.IsDir() && st.Mode()&0o111 != 0
}
