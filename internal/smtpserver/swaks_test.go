package smtpserver

import (
	"os/exec"
	"strings"
	"testing"
)

// TestSwaks sends with swaks, a client written by others, pipelining and
// with STARTTLS where offered. It is skipped where swaks is not installed
// (apt-get install swaks).
func TestSwaks(t *testing.T) {
	swaks, err := exec.LookPath("swaks")
	if err != nil {
		t.Skip("swaks not installed")
	}
	ca := newTestCA(t)
	certFile, keyFile := ca.issue(t, t.TempDir(), 3)
	b := newBackend()
	_, addr := start(t, Config{TLSCertFile: certFile, TLSKeyFile: keyFile}, b)
	host, port, _ := strings.Cut(addr, ":")
	out, err := exec.Command(swaks, "--server", host, "--port", port,
		"--from", "a@client.test", "--to", "b@mx.mailyard.test",
		"--pipeline", "--tls-optional", "--header", "Subject: swaks",
		"--body", "hello from swaks").CombinedOutput()
	if err != nil {
		t.Fatalf("swaks: %v\n%s", err, out)
	}
	for _, want := range []string{"250-PIPELINING", "250-STARTTLS", "TLS started"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("swaks transcript lacks %q:\n%s", want, out)
		}
	}
	got := b.delivered()
	if len(got) != 1 || !strings.Contains(string(got[0]), "hello from swaks\r\n") {
		t.Fatalf("delivered %q", got)
	}
}
