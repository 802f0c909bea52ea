// Package temporalserver runs the real Temporal server — not the dev server — as a
// child process with persistence and visibility in PostgreSQL, the way a cluster
// keeps them, for the test of the production topology and for `make bench`. The
// binaries (bin/temporal-server, bin/temporal-sql-tool) are built by `make
// temporal-server` from the Go module proxy; mailyard never links the server.
package temporalserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"

	"github.com/mailyard/mailyard/internal/freeport"
	"github.com/mailyard/mailyard/internal/temporalsetup"
)

// Names of the binaries in bin/.
const (
	ServerBinary  = "temporal-server"
	SQLToolBinary = "temporal-sql-tool"
	// env is the server's --env: it loads <dir>/config/<env>.yaml.
	env = "mailyard"
)

// ErrNoBinaries explains how to get them.
var ErrNoBinaries = errors.New("the real Temporal server is not built: run `make temporal-server` (it builds bin/" +
	ServerBinary + " and bin/" + SQLToolBinary + " from the Go module proxy once, in about five minutes; `make test` does it first)")

// FindBinaries looks for bin/temporal-server and bin/temporal-sql-tool in the
// working directory or a parent (tests run in their package's directory).
func FindBinaries() (server, sqlTool string, err error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", "", err
	}
	for {
		server, sqlTool = filepath.Join(dir, "bin", ServerBinary), filepath.Join(dir, "bin", SQLToolBinary)
		if isFile(server) && isFile(sqlTool) {
			return server, sqlTool, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", "", ErrNoBinaries
		}
		dir = parent
	}
}

func isFile(path string) bool {
	st, err := os.Stat(path)
	return err == nil && !st.IsDir()
}

// Options of one server.
type Options struct {
	Server, SQLTool string // paths of the binaries; empty: FindBinaries()
	// Persistence and Visibility are postgres:// URLs of two empty databases.
	Persistence, Visibility string
	Dir                     string    // for the configuration; it must exist
	Namespace               string    // registered on the first start; empty: "default"
	Output                  io.Writer // the server's log (warnings and errors)
	// MaxConns caps each service's connections to the persistence database;
	// visibility gets a quarter, at least 2. The four services have pools of
	// their own, so the server may hold 4 × that many. 0 means 4 (24 in all),
	// which leaves most of a shared PostgreSQL's 100 connections to the tests.
	MaxConns int
}

// Server is the real Temporal server: all four services (frontend, history,
// matching, worker) in one process. Stop and Start restart it on the same
// databases and ports, so what it stored survives, as it does on a cluster.
type Server struct {
	Address   string // frontend gRPC, host:port
	Namespace string
	// MetricsURL serves the server's Prometheus metrics, as a cluster's
	// servers do for their operators (the benchmarks read them).
	MetricsURL string

	binary string
	dir    string
	output io.Writer
	cmd    *exec.Cmd
	done   chan struct{}
}

// New loads the schemas into the two databases with the SQL tool and writes the
// server's configuration with free loopback ports; Start starts it.
func New(ctx context.Context, o Options) (*Server, error) {
	if o.Server == "" || o.SQLTool == "" {
		var err error
		if o.Server, o.SQLTool, err = FindBinaries(); err != nil {
			return nil, err
		}
	}
	if o.Namespace == "" {
		o.Namespace = "default"
	}
	persistence, err := url.Parse(o.Persistence)
	if err != nil {
		return nil, fmt.Errorf("persistence database URL: %w", err)
	}
	visibility, err := url.Parse(o.Visibility)
	if err != nil {
		return nil, fmt.Errorf("visibility database URL: %w", err)
	}
	// The versioned schemas of postgresql/v12 are embedded in the SQL tool (the
	// files of schema/postgresql/v12 in the server module): version 0.0 creates
	// the versioning table, update-schema applies every version in order.
	if err := setupSchema(ctx, o.SQLTool, persistence, "postgresql/v12/temporal"); err != nil {
		return nil, err
	}
	if err := setupSchema(ctx, o.SQLTool, visibility, "postgresql/v12/visibility"); err != nil {
		return nil, err
	}
	ports, err := freeport.Ports("127.0.0.1", 10)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Join(o.Dir, "config"), 0o755); err != nil {
		return nil, err
	}
	// YAML is a superset of JSON: the configuration is written with encoding/json.
	if o.MaxConns <= 0 {
		o.MaxConns = 4
	}
	cfg, err := json.MarshalIndent(serverConfig(persistence, visibility, ports, o.MaxConns), "", "  ")
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(o.Dir, "config", env+".yaml"), cfg, 0o600); err != nil {
		return nil, err
	}
	output := o.Output
	if output == nil {
		output = io.Discard
	}
	return &Server{
		Address:    net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0])),
		MetricsURL: "http://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[9])) + "/metrics",
		Namespace:  o.Namespace, binary: o.Server, dir: o.Dir, output: output,
	}, nil
}

// Start starts the server (again, after Stop) and waits until the namespace is
// usable; the namespace and Mailyard's search attributes are registered if they
// are not there.
func (s *Server) Start(ctx context.Context) error {
	if s.cmd != nil {
		return errors.New("the Temporal server is running")
	}
	cmd := exec.Command(s.binary, "--root", s.dir, "--config", "config", "--env", env, "--allow-no-auth", "start")
	// The end of the log goes into the error if the server exits while starting.
	last := &tailBuffer{max: 4 << 10}
	out := io.MultiWriter(s.output, last)
	cmd.Stdout, cmd.Stderr = out, out
	// Killed with its parent, so a crashed test or benchmark leaves no server.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", s.binary, err)
	}
	s.cmd, s.done = cmd, make(chan struct{})
	go func() { _ = cmd.Wait(); close(s.done) }()

	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	if err := s.waitUsable(ctx); err != nil {
		s.Stop()
		return fmt.Errorf("the Temporal server at %s: %w; the end of its log:\n%s", s.Address, err, last.String())
	}
	return nil
}

// Pid is the server's process id, 0 when it is not running (the
// benchmarks read its CPU time).
func (s *Server) Pid() int {
	if s.cmd == nil || s.cmd.Process == nil {
		return 0
	}
	return s.cmd.Process.Pid
}

// Stop ends the server as an operator's restart would (SIGTERM, SIGKILL after
// 30 s) and waits for it; the databases stay.
func (s *Server) Stop() {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(30 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.done
	}
	s.cmd = nil
}

// waitUsable waits for the frontend, registers the namespace if it is not there,
// and then for a history shard to answer for it: describing a workflow that does
// not exist comes back NotFound only once the namespace is in every service's
// cache and the shard is loaded, and it leaves nothing behind.
func (s *Server) waitUsable(ctx context.Context) error {
	for {
		select {
		case <-s.done:
			return errors.New("the server exited during start")
		default:
		}
		err := s.probe(ctx)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("not usable in time: %v", err)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

func (s *Server) probe(ctx context.Context) error {
	c, err := client.Dial(client.Options{HostPort: s.Address, Namespace: s.Namespace, Logger: quietLogger{}})
	if err != nil {
		return err
	}
	defer c.Close()
	if err := temporalsetup.Setup(ctx, c, s.Namespace, 24*time.Hour, nil); err != nil {
		return err
	}
	_, err = c.DescribeWorkflowExecution(ctx, "temporalserver-readiness-probe", "")
	var notFound *serviceerror.NotFound
	if errors.As(err, &notFound) {
		return nil
	}
	if err == nil {
		return errors.New("a workflow temporalserver-readiness-probe exists")
	}
	return err
}

// setupSchema runs the server's SQL tool on one database. The connection goes in
// its SQL_* variables, so no password is on a command line.
func setupSchema(ctx context.Context, tool string, db *url.URL, schema string) error {
	password, _ := db.User.Password()
	env := append(os.Environ(),
		"SQL_PLUGIN=postgres12",
		"SQL_HOST="+db.Hostname(),
		"SQL_PORT="+portOf(db),
		"SQL_USER="+db.User.Username(),
		"SQL_PASSWORD="+password,
		"SQL_DATABASE="+databaseName(db),
	)
	for _, args := range [][]string{
		{"setup-schema", "-v", "0.0"},
		{"update-schema", "--schema-name", schema},
	} {
		cmd := exec.CommandContext(ctx, tool, args...)
		cmd.Env = env
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("%s %v on %s: %v\n%s", SQLToolBinary, args, databaseName(db), err, out)
		}
	}
	return nil
}

// serverConfig is the shape of the server's config/development-postgres12.yaml
// with these databases and ports: frontend, history, matching and worker gRPC,
// then their membership ports, then the frontend's HTTP port and the
// Prometheus metrics port. No pprof listener; log level warn.
func serverConfig(persistence, visibility *url.URL, p []int, maxConns int) map[string]any {
	store := func(db *url.URL, conns int) map[string]any {
		password, _ := db.User.Password()
		return map[string]any{"sql": map[string]any{
			"pluginName":      "postgres12",
			"databaseName":    databaseName(db),
			"connectAddr":     net.JoinHostPort(db.Hostname(), portOf(db)),
			"connectProtocol": "tcp",
			"user":            db.User.Username(),
			"password":        password,
			"maxConns":        conns,
			"maxIdleConns":    conns,
			"maxConnLifetime": "1h",
		}}
	}
	service := func(grpc, membership int) map[string]any {
		return map[string]any{"rpc": map[string]any{"grpcPort": grpc, "membershipPort": membership, "bindOnLocalHost": true}}
	}
	frontend := service(p[0], p[4])
	frontend["rpc"].(map[string]any)["httpPort"] = p[8]
	return map[string]any{
		"log": map[string]any{"stdout": true, "level": "warn"},
		"persistence": map[string]any{
			"defaultStore":     "postgres-default",
			"visibilityStore":  "postgres-visibility",
			"numHistoryShards": 4,
			"datastores": map[string]any{
				"postgres-default":    store(persistence, maxConns),
				"postgres-visibility": store(visibility, max(2, maxConns/4)),
			},
		},
		"global": map[string]any{
			"membership": map[string]any{"maxJoinDuration": "30s", "broadcastAddress": "127.0.0.1"},
			"metrics": map[string]any{"prometheus": map[string]any{
				"timerType": "histogram", "listenAddress": net.JoinHostPort("127.0.0.1", strconv.Itoa(p[9])),
			}},
		},
		"services": map[string]any{
			"frontend": frontend,
			"history":  service(p[1], p[5]),
			"matching": service(p[2], p[6]),
			"worker":   service(p[3], p[7]),
		},
		"clusterMetadata": map[string]any{
			"enableGlobalNamespace":    false,
			"failoverVersionIncrement": 10,
			"masterClusterName":        "active",
			"currentClusterName":       "active",
			"clusterInformation": map[string]any{
				"active": map[string]any{
					"enabled":                true,
					"initialFailoverVersion": 1,
					"rpcName":                "frontend",
					"rpcAddress":             net.JoinHostPort("127.0.0.1", strconv.Itoa(p[0])),
				},
			},
		},
		"dcRedirectionPolicy": map[string]any{"policy": "noop"},
	}
}

func databaseName(u *url.URL) string {
	if len(u.Path) > 1 {
		return u.Path[1:]
	}
	return ""
}

func portOf(u *url.URL) string {
	if p := u.Port(); p != "" {
		return p
	}
	return "5432"
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	if len(b.buf) > b.max {
		b.buf = append(b.buf[:0], b.buf[len(b.buf)-b.max:]...)
	}
	return len(p), nil
}

func (b *tailBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.buf)
}

// quietLogger drops the SDK's connection-retry chatter while waiting.
type quietLogger struct{}

func (quietLogger) Debug(string, ...interface{}) {}
func (quietLogger) Info(string, ...interface{})  {}
func (quietLogger) Warn(string, ...interface{})  {}
func (quietLogger) Error(string, ...interface{}) {}
