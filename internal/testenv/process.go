package testenv

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mailyard/mailyard/internal/freeport"
)

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// Binary builds the mailyard command once per test process and returns its path.
// Under the race detector (go test -race) it is built with -race as well, so a
// data race in the api, worker or dns process fails the test that ran it (see
// checkRace). It is built with the mailyard_testhooks tag: cmd/mailyard/testhooks.go
// lets a test shorten a wait inside the Temporal SDK through the environment.
func Binary(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		_, file, _, _ := runtime.Caller(0)
		root := filepath.Join(filepath.Dir(file), "..", "..")
		dir, err := os.MkdirTemp("", "mailyard-bin-")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "mailyard")
		args := []string{"build", "-tags", "mailyard_testhooks", "-o", binPath}
		if raceEnabled {
			args = append(args, "-race")
		}
		cmd := exec.Command("go", append(args, "./cmd/mailyard")...)
		cmd.Dir = root
		out, err := cmd.CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

// Process is a running mailyard subcommand.
type Process struct {
	cmd    *exec.Cmd
	output *SyncBuffer
	done   chan struct{}
}

// Start runs the binary with args and env (added to a minimal environment); it
// is stopped with SIGTERM when the test ends, and its output is logged on failure.
func Start(t testing.TB, env []string, args ...string) *Process {
	t.Helper()
	return StartIn(t, "", env, args...)
}

// StartIn is Start in the working directory dir ("" for the test's own).
func StartIn(t testing.TB, dir string, env []string, args ...string) *Process {
	t.Helper()
	cmd := mailyardCommand(t, dir, env, args...)
	p := &Process{cmd: cmd, output: &SyncBuffer{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.output, p.output
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		p.Stop()
		checkRace(t, args, p.ExitCode(), p.output.String())
		if t.Failed() {
			t.Logf("output of mailyard %v:\n%s", args, p.output.String())
		}
	})
	return p
}

// raceExitCode is the status a program built with -race exits with when it
// found a data race (GORACE exitcode, 66 unless set).
const raceExitCode = 66

// checkRace fails the test if a mailyard process reported a data race: its
// report in the output (also when the process was killed), or the race
// detector's exit status.
func checkRace(t testing.TB, args []string, exitCode int, output string) bool {
	t.Helper()
	if !raceEnabled || !strings.Contains(output, "WARNING: DATA RACE") && exitCode != raceExitCode {
		return false
	}
	t.Errorf("mailyard %v reported a data race (exit status %d); its output is below", args, exitCode)
	return true
}

// Run runs the binary with args and env (as Start) to completion, a short-lived
// subcommand such as `migrate up`, and returns its output (stdout and stderr).
// The test fails if the command does, or takes more than 3 minutes.
func Run(t testing.TB, env []string, args ...string) string {
	t.Helper()
	cmd := mailyardCommand(t, "", env, args...)
	var out SyncBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if raced := checkRace(t, args, cmd.ProcessState.ExitCode(), out.String()); err != nil || raced {
			t.Fatalf("mailyard %v: %v\n%s", args, err, out.String())
		}
	case <-time.After(3 * time.Minute):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("mailyard %v did not end within 3 minutes:\n%s", args, out.String())
	}
	return out.String()
}

// mailyardCommand is the binary with args, in dir, with env added to a minimal
// environment.
func mailyardCommand(t testing.TB, dir string, env []string, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(Binary(t), args...)
	cmd.Dir = dir
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}, env...)
	return cmd
}

// Stop sends SIGTERM and waits (SIGKILL after 15 s).
func (p *Process) Stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(15 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// Kill ends the process at once, as a crash would.
func (p *Process) Kill() {
	_ = p.cmd.Process.Kill()
	<-p.done
}

// Exited reports whether the process has ended.
func (p *Process) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// ExitCode is the exit status of an ended process (-1 while it runs).
func (p *Process) ExitCode() int {
	if !p.Exited() {
		return -1
	}
	return p.cmd.ProcessState.ExitCode()
}

// Output is what the process printed so far.
func (p *Process) Output() string { return p.output.String() }

// FreeAddr returns a loopback host:port nobody listens on right now (see
// internal/freeport).
func FreeAddr(t testing.TB) string {
	t.Helper()
	port, err := freeport.Port("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
}

// WaitListening waits until addr accepts TCP connections.
func WaitListening(t testing.TB, addr string, timeout time.Duration) {
	t.Helper()
	Eventually(t, timeout, addr+" to listen", func() bool {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
}

// SyncBuffer collects output written from several goroutines (a child's stdout
// and stderr, a server's logs).
type SyncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *SyncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *SyncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
