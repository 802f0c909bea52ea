// Package temporaldev runs the real Temporal dev server (the `temporal` CLI built
// from the Go module proxy into bin/) as a child process, for `mailyard dev` and for
// tests. Production never uses it: it connects to a Temporal cluster instead, and the
// mailyard binary does not link the server.
package temporaldev

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/mailyard/mailyard/internal/freeport"
	"github.com/mailyard/mailyard/internal/temporalsetup"
)

// Options of one dev server.
type Options struct {
	Binary     string // path of the temporal CLI; empty: FindBinary()
	DBFile     string // persist workflows here; empty: in memory
	IP         string // default 127.0.0.1
	Port       int    // frontend gRPC; 0: a free port
	UIPort     int    // 0 with Headless false: Port+1000
	Headless   bool   // no Web UI (tests)
	Output     io.Writer
	Namespaces []string
	// DynamicConfig are KEY=VALUE settings of the server's dynamic config
	// (--dynamic-config-value; VALUE is JSON, e.g. a "5s" duration).
	DynamicConfig []string
}

// Server is a running dev server.
type Server struct {
	Address    string // host:port of the frontend
	UIURL      string // empty when headless
	MetricsURL string // the server's Prometheus metrics
	cmd        *exec.Cmd
	done       chan error
}

// ErrNoBinary explains how to get the binary.
var ErrNoBinary = errors.New("the Temporal dev server binary is missing: run `make temporal` (it builds bin/temporal from the Go module proxy once, in a few minutes)")

// FindBinary looks for the CLI in $MAILYARD_TEMPORAL_CLI, then bin/temporal in this
// directory or a parent (tests run in package directories), then $PATH.
func FindBinary() (string, error) {
	if p := os.Getenv("MAILYARD_TEMPORAL_CLI"); p != "" {
		return p, nil
	}
	if dir, err := os.Getwd(); err == nil {
		for {
			candidate := filepath.Join(dir, "bin", "temporal")
			if st, err := os.Stat(candidate); err == nil && !st.IsDir() {
				return candidate, nil
			}
			parent := filepath.Dir(dir)
			if parent == dir {
				break
			}
			dir = parent
		}
	}
	if p, err := exec.LookPath("temporal"); err == nil {
		return p, nil
	}
	return "", ErrNoBinary
}

// Start launches the server and waits until its frontend answers health checks.
// Ports left at 0 are chosen free; since another process may take one between
// the choice and the server's bind, such a start is tried up to three times.
func Start(ctx context.Context, o Options) (*Server, error) {
	tries := 1
	if o.Port == 0 {
		tries = 3
	}
	for try := 1; ; try++ {
		s, err := start(ctx, o)
		if err == nil || try == tries || ctx.Err() != nil {
			return s, err
		}
	}
}

func start(ctx context.Context, o Options) (*Server, error) {
	if o.Binary == "" {
		bin, err := FindBinary()
		if err != nil {
			return nil, err
		}
		o.Binary = bin
	}
	if o.IP == "" {
		o.IP = "127.0.0.1"
	}
	ports, err := freeport.Ports(o.IP, 3)
	if err != nil {
		return nil, err
	}
	httpPort, metricsPort := ports[1], ports[2]
	if o.Port == 0 {
		o.Port = ports[0]
	}
	args := []string{"server", "start-dev",
		"--ip", o.IP, "--port", strconv.Itoa(o.Port),
		"--http-port", strconv.Itoa(httpPort), "--metrics-port", strconv.Itoa(metricsPort),
		"--log-level", "error", "--color", "never",
	}
	if o.DBFile != "" {
		args = append(args, "--db-filename", o.DBFile)
	}
	for _, kv := range o.DynamicConfig {
		args = append(args, "--dynamic-config-value", kv)
	}
	s := &Server{
		Address:    net.JoinHostPort(o.IP, strconv.Itoa(o.Port)),
		MetricsURL: "http://" + net.JoinHostPort(o.IP, strconv.Itoa(metricsPort)) + "/metrics",
		done:       make(chan error, 1),
	}
	if o.Headless {
		args = append(args, "--headless")
	} else {
		if o.UIPort == 0 {
			o.UIPort = o.Port + 1000
		}
		args = append(args, "--ui-port", strconv.Itoa(o.UIPort))
		s.UIURL = "http://" + net.JoinHostPort(o.IP, strconv.Itoa(o.UIPort))
	}
	cmd := exec.Command(o.Binary, args...)
	cmd.Stdout, cmd.Stderr = o.Output, o.Output
	// Its own process group: a Ctrl-C in the terminal reaches mailyard, which then
	// stops the server in order instead of both racing.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start temporal dev server: %w", err)
	}
	s.cmd = cmd
	go func() { s.done <- cmd.Wait() }()

	if err := s.waitHealthy(ctx, 2*time.Minute); err != nil {
		s.Stop()
		return nil, err
	}
	// The same setup as `mailyard temporal setup` on a cluster: every
	// Mailyard workflow carries the search attributes, and a start without
	// them registered is refused.
	if err := s.setup(ctx, append([]string{"default"}, o.Namespaces...)); err != nil {
		s.Stop()
		return nil, err
	}
	return s, nil
}

// setup makes each namespace ready for Mailyard (internal/temporalsetup).
func (s *Server) setup(ctx context.Context, namespaces []string) error {
	c, err := client.Dial(client.Options{HostPort: s.Address, Logger: quietLogger{}})
	if err != nil {
		return err
	}
	defer c.Close()
	for _, ns := range namespaces {
		if err := temporalsetup.Setup(ctx, c, ns, 24*time.Hour, nil); err != nil {
			return fmt.Errorf("temporal dev server: %w", err)
		}
	}
	return nil
}

func (s *Server) waitHealthy(ctx context.Context, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		select {
		case err := <-s.done:
			s.done <- err
			return fmt.Errorf("temporal dev server exited during start: %v", err)
		default:
		}
		c, err := client.Dial(client.Options{HostPort: s.Address, Logger: quietLogger{}})
		if err == nil {
			_, err = c.CheckHealth(ctx, &client.CheckHealthRequest{})
			c.Close()
			if err == nil {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("temporal dev server at %s not healthy after %s: %v", s.Address, limit, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// Pid is the server's process id (the benchmarks read its CPU time).
func (s *Server) Pid() int {
	if s.cmd == nil || s.cmd.Process == nil {
		return 0
	}
	return s.cmd.Process.Pid
}

// Stop ends the server gracefully (SIGTERM, then SIGKILL after 10 s) and waits.
func (s *Server) Stop() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-s.done:
		s.done <- err
	case <-time.After(10 * time.Second):
		_ = s.cmd.Process.Kill()
		err := <-s.done
		s.done <- err
	}
}

// quietLogger drops the SDK's connection-retry chatter while waiting.
type quietLogger struct{}

func (quietLogger) Debug(string, ...interface{}) {}
func (quietLogger) Info(string, ...interface{})  {}
func (quietLogger) Warn(string, ...interface{})  {}
func (quietLogger) Error(string, ...interface{}) {}
