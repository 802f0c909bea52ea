package testenv

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"google.golang.org/protobuf/types/known/durationpb"
)

// Names of the real server's binaries in bin/ (`make temporal-server` builds them
// from the Go module proxy; `make test` does it first).
const (
	serverBinary  = "temporal-server"
	sqlToolBinary = "temporal-sql-tool"
	// realEnv is the server's --env: it loads <config dir>/<env>.yaml.
	realEnv = "mailyard-test"
)

// RealTemporal is the Temporal server as production runs it, not the dev server:
// all four services (frontend, history, matching, worker) in one process, with
// persistence and visibility in two PostgreSQL databases of their own. Stop and
// Start restart it on the same databases and ports, so what it had stored must
// survive, as it must on a cluster.
type RealTemporal struct {
	Address   string // frontend gRPC, host:port
	Namespace string // registered and usable when StartRealTemporal returns

	t       testing.TB
	binary  string
	root    string // holds config/<realEnv>.yaml
	output  *SyncBuffer
	cmd     *exec.Cmd
	done    chan struct{}
	stopped bool
}

// StartRealTemporal creates the two databases, sets up their schemas with the
// server's SQL tool, starts the server, registers the namespace "default" and
// waits until workflows can run in it. Everything ends with the test. Without
// the binaries the test is skipped, except under CI (CI set), where it fails.
func StartRealTemporal(t testing.TB) *RealTemporal {
	t.Helper()
	server, errServer := findRepoBinary(serverBinary)
	sqlTool, errTool := findRepoBinary(sqlToolBinary)
	if err := errors.Join(errServer, errTool); err != nil {
		msg := fmt.Sprintf("the real Temporal server is not built (%v): run `make temporal-server` (it builds bin/%s and bin/%s from the Go module proxy once, in about five minutes; `make test` does it first)", err, serverBinary, sqlToolBinary)
		if os.Getenv("CI") != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}

	persistence := createDatabase(t, "temporal_test_")
	visibility := createDatabase(t, "temporal_visibility_test_")
	// The versioned schemas of postgresql/v12 are embedded in the SQL tool (the
	// same files as schema/postgresql/v12 of the server module): version 0.0
	// creates the versioning table, update-schema applies every version in order.
	setupSchema(t, sqlTool, persistence, "postgresql/v12/temporal")
	setupSchema(t, sqlTool, visibility, "postgresql/v12/visibility")

	r := &RealTemporal{t: t, binary: server, root: t.TempDir(), output: &SyncBuffer{}, Namespace: "default"}
	ports := freePorts(t, 9)
	r.Address = net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0]))
	if err := os.MkdirAll(filepath.Join(r.root, "config"), 0o755); err != nil {
		t.Fatal(err)
	}
	// YAML is a superset of JSON: the config is written with encoding/json.
	cfg, err := json.MarshalIndent(serverConfig(persistence, visibility, ports), "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(r.root, "config", realEnv+".yaml"), cfg, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		r.Stop()
		if t.Failed() {
			t.Logf("output of the Temporal server:\n%s", r.output.String())
		}
	})
	r.Start()
	return r
}

// Start starts the server (again, after Stop) and waits until the namespace is
// usable; the namespace is registered the first time.
func (r *RealTemporal) Start() {
	r.t.Helper()
	cmd := exec.Command(r.binary, "--root", r.root, "--config", "config", "--env", realEnv, "--allow-no-auth", "start")
	cmd.Stdout, cmd.Stderr = r.output, r.output
	// Killed with the test binary, so a crashed test leaves no server behind.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		r.t.Fatalf("start %s: %v", r.binary, err)
	}
	r.cmd, r.done, r.stopped = cmd, make(chan struct{}), false
	go func() { _ = cmd.Wait(); close(r.done) }()

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := r.waitUsable(ctx); err != nil {
		r.t.Fatalf("Temporal server at %s: %v\n%s", r.Address, err, r.output.String())
	}
}

// Stop ends the server as an operator's restart would (SIGTERM, SIGKILL after
// 30 s) and waits for it; the databases stay.
func (r *RealTemporal) Stop() {
	if r.cmd == nil || r.stopped {
		return
	}
	r.stopped = true
	_ = r.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-r.done:
	case <-time.After(30 * time.Second):
		_ = r.cmd.Process.Kill()
		<-r.done
	}
}

// Output is what the server logged so far (warnings and errors).
func (r *RealTemporal) Output() string { return r.output.String() }

// waitUsable waits for the frontend, registers the namespace if it is not there,
// and then for a history shard to answer for it: a describe of a workflow that
// does not exist comes back NotFound only once the namespace is in every
// service's cache and the shard is loaded, and it leaves nothing behind.
func (r *RealTemporal) waitUsable(ctx context.Context) error {
	var last error
	for {
		select {
		case <-r.done:
			return errors.New("the server exited during start")
		default:
		}
		last = r.probe(ctx)
		if last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("not usable in time: %v", last)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

func (r *RealTemporal) probe(ctx context.Context) error {
	nc, err := client.NewNamespaceClient(client.Options{HostPort: r.Address, Logger: quietLogger{}})
	if err != nil {
		return err
	}
	defer nc.Close()
	if _, err := nc.Describe(ctx, r.Namespace); err != nil {
		var notFound *serviceerror.NamespaceNotFound
		if !errors.As(err, &notFound) {
			return err
		}
		err = nc.Register(ctx, &workflowservice.RegisterNamespaceRequest{
			Namespace:                        r.Namespace,
			WorkflowExecutionRetentionPeriod: durationpb.New(24 * time.Hour),
		})
		var exists *serviceerror.NamespaceAlreadyExists
		if err != nil && !errors.As(err, &exists) {
			return fmt.Errorf("register namespace %s: %w", r.Namespace, err)
		}
	}
	c, err := client.Dial(client.Options{HostPort: r.Address, Namespace: r.Namespace, Logger: quietLogger{}})
	if err != nil {
		return err
	}
	defer c.Close()
	_, err = c.DescribeWorkflowExecution(ctx, "testenv-readiness-probe", "")
	var notFound *serviceerror.NotFound
	if errors.As(err, &notFound) {
		return nil
	}
	if err == nil {
		return errors.New("a workflow testenv-readiness-probe exists")
	}
	return err
}

// setupSchema runs the server's SQL tool on one database. The connection goes in
// its SQL_* variables, so no password is on a command line.
func setupSchema(t testing.TB, tool string, db *url.URL, schema string) {
	t.Helper()
	password, _ := db.User.Password()
	env := append(os.Environ(),
		"SQL_PLUGIN=postgres12",
		"SQL_HOST="+db.Hostname(),
		"SQL_PORT="+portOf(db),
		"SQL_USER="+db.User.Username(),
		"SQL_PASSWORD="+password,
		"SQL_DATABASE="+db.Path[1:],
	)
	for _, args := range [][]string{
		{"setup-schema", "-v", "0.0"},
		{"update-schema", "--schema-name", schema},
	} {
		cmd := exec.Command(tool, args...)
		cmd.Env = env
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s %v on %s: %v\n%s", sqlToolBinary, args, db.Path[1:], err, out)
		}
	}
}

// serverConfig is the shape of the server's config/development-postgres12.yaml
// with this test's databases and ports: frontend, history, matching and worker
// gRPC, then their membership ports, then the frontend's HTTP port. No metrics
// and no pprof listeners; log level warn.
func serverConfig(persistence, visibility *url.URL, p []int) map[string]any {
	store := func(db *url.URL, conns int) map[string]any {
		password, _ := db.User.Password()
		return map[string]any{"sql": map[string]any{
			"pluginName":      "postgres12",
			"databaseName":    db.Path[1:],
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
				"postgres-default":    store(persistence, 20),
				"postgres-visibility": store(visibility, 5),
			},
		},
		"global": map[string]any{
			"membership": map[string]any{"maxJoinDuration": "30s", "broadcastAddress": "127.0.0.1"},
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

func portOf(u *url.URL) string {
	if p := u.Port(); p != "" {
		return p
	}
	return "5432"
}

// freePorts returns n distinct loopback ports nobody listens on right now; all
// are held open together while choosing, so none is returned twice.
func freePorts(t testing.TB, n int) []int {
	t.Helper()
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports
}

// findRepoBinary looks for bin/<name> in the working directory or a parent
// (tests run in their package's directory).
func findRepoBinary(name string) (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		candidate := filepath.Join(dir, "bin", name)
		if st, err := os.Stat(candidate); err == nil && !st.IsDir() {
			return candidate, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no bin/%s here or above", name)
		}
		dir = parent
	}
}

// quietLogger drops the SDK's connection-retry chatter while waiting.
type quietLogger struct{}

func (quietLogger) Debug(string, ...interface{}) {}
func (quietLogger) Info(string, ...interface{})  {}
func (quietLogger) Warn(string, ...interface{})  {}
func (quietLogger) Error(string, ...interface{}) {}
