package main

import (
	"bufio"
	"context"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// buildMailyard builds the mailyard binary once for the run (the burst runs
// `mailyard worker` as a process of its own).
func buildMailyard(ctx context.Context) (string, func(), error) {
	dir, err := os.MkdirTemp("", "mailyard-bench-bin-")
	if err != nil {
		return "", nil, err
	}
	bin := filepath.Join(dir, "mailyard")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/mailyard")
	if out, err := cmd.CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		return "", nil, fmt.Errorf("go build ./cmd/mailyard (run the bench from the repository root): %v\n%s", err, out)
	}
	return bin, func() { os.RemoveAll(dir) }, nil
}

// workerEnv is what a `mailyard worker` of the benchmark needs.
type workerEnv struct {
	databaseURL, temporal string
	key                   []byte
	caPEM                 []byte // the receiver's certificate
}

func pemOf(c *x509.Certificate) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})
}

// runBurst ingests burstEvents events at once, with the deliveries made by a
// `mailyard worker` process, and notes how many arrived, how fast, and the
// worker's peak resident memory (VmHWM).
func runBurst(ctx context.Context, out io.Writer, fig *deliveryFigures, ing *ingester, rcv *arrivals, bin string, env workerEnv) error {
	dir, err := os.MkdirTemp("", "mailyard-bench-worker-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	caFile := filepath.Join(dir, "receiver-ca.pem")
	if err := os.WriteFile(caFile, env.caPEM, 0o600); err != nil {
		return err
	}
	cmd := exec.Command(bin, "worker")
	cmd.Env = []string{
		"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"),
		"MAILYARD_DATABASE_URL=" + env.databaseURL,
		"TEMPORAL_ADDRESS=" + env.temporal,
		"MAILYARD_ENCRYPTION_KEY=" + base64.StdEncoding.EncodeToString(env.key),
		"MAILYARD_WEBHOOK_ALLOW_PRIVATE_NETWORKS=true",
		// The receiver's test CA, the way an operator adds a private one.
		"SSL_CERT_FILE=" + caFile,
	}
	logs := &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	stop := func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(time.Minute):
			_ = cmd.Process.Kill()
			<-exited
		}
	}
	defer stop()

	rcv.expect(burstEvents)
	start := time.Now()
	if err := parallel(burstEvents, func(i int) error {
		_, err := ing.send(ctx, fmt.Sprintf("burst-%d-%d", start.UnixNano(), i))
		return err
	}); err != nil {
		return err
	}
	ingested := time.Since(start)
	waitErr := rcv.wait(ctx, 15*time.Minute)
	elapsed := time.Since(start)
	fig.burstDelivered = rcv.count()
	fig.burstRate = float64(fig.burstDelivered) / elapsed.Seconds()
	hwm, err := vmHWM(cmd.Process.Pid)
	if err != nil {
		return fmt.Errorf("worker memory: %w (worker output:\n%s)", err, tail(logs.String(), 2000))
	}
	fig.workerHWM = hwm
	fmt.Fprintf(out, "%d events at once (ingested in %.1f s): %d delivered in %.1f s (%.1f /s) by `mailyard worker`, its peak RSS (VmHWM) %.0f MB (goal < 150)\n",
		burstEvents, ingested.Seconds(), fig.burstDelivered, elapsed.Seconds(), fig.burstRate, mb(hwm))
	if waitErr != nil {
		fmt.Fprintf(out, "  not all delivered: %v\n  worker output (end):\n%s\n", waitErr, tail(logs.String(), 2000))
	}
	return nil
}

// vmHWM reads a process's peak resident set size from /proc/<pid>/status.
func vmHWM(pid int) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if v, ok := strings.CutPrefix(s.Text(), "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("no VmHWM in /proc/%d/status", pid)
}

// loadAverage is /proc/loadavg's 1, 5 and 15 minute figures: the machine
// may be shared, and the figures are read against it.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// lockedBuffer collects a process's output for the report of a failure.
type lockedBuffer struct {
	mu  sync.Mutex
	buf []byte
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	if len(b.buf) > 1<<20 {
		b.buf = b.buf[len(b.buf)-(1<<19):]
	}
	return len(p), nil
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.buf)
}
