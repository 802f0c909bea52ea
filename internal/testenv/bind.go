package testenv

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/mailyard/mailyard/internal/freeport"
)

// BIND is a BIND 9 primary for one zone that accepts dynamic updates (RFC 2136)
// signed with a fresh TSIG key, run in the foreground for one test. It can be
// stopped and started again on the same port with the same data, as an outage.
type BIND struct {
	Addr string
	Zone string
	// UpdateKey may update the zone; OtherKey is known to the server but has
	// no update rights. Both are name:algorithm:base64secret.
	UpdateKey, OtherKey string

	t       testing.TB
	conf    string
	stderr  *SyncBuffer
	cmd     *exec.Cmd
	exited  chan error
	running bool
}

// StartBIND runs named for zone until the test ends. CI installs BIND, so a
// missing named fails the test rather than skipping it.
func StartBIND(t testing.TB, zone string) *BIND {
	t.Helper()
	dir := t.TempDir()
	port, err := freeport.Port("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	updateSecret, otherSecret := RandomSecret(t), RandomSecret(t)
	zoneFile := filepath.Join(dir, zone+".db")
	writeFile(t, zoneFile, fmt.Sprintf(`$TTL 300
@	IN SOA ns1.%[1]s. hostmaster.%[1]s. 1 3600 600 604800 60
@	IN NS ns1.%[1]s.
ns1	IN A 127.0.0.1
`, zone))
	conf := filepath.Join(dir, "named.conf")
	writeFile(t, conf, fmt.Sprintf(`options {
	directory "%[1]s";
	pid-file "%[1]s/named.pid";
	session-keyfile "%[1]s/session.key";
	managed-keys-directory "%[1]s";
	listen-on port %[2]d { 127.0.0.1; };
	listen-on-v6 { none; };
	recursion no;
	allow-transfer { none; };
	dnssec-validation no;
	notify no;
};
controls { };
key "mailyard-update." { algorithm hmac-sha256; secret "%[3]s"; };
key "mailyard-other." { algorithm hmac-sha256; secret "%[4]s"; };
zone "%[5]s" {
	type primary;
	file "%[6]s";
	allow-update { key "mailyard-update."; };
};
`, dir, port, updateSecret, otherSecret, zone, zoneFile))
	b := &BIND{
		Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), Zone: zone,
		UpdateKey: "mailyard-update:hmac-sha256:" + updateSecret,
		OtherKey:  "mailyard-other:hmac-sha256:" + otherSecret,
		t:         t, conf: conf,
	}
	b.Start()
	t.Cleanup(b.Stop)
	return b
}

// Start runs named (again) and waits until it answers for the zone; updates
// made before a Stop are kept in the zone's journal.
func (b *BIND) Start() {
	b.t.Helper()
	if b.running {
		return
	}
	b.stderr = &SyncBuffer{}
	b.cmd = exec.Command(findNamed(b.t), "-g", "-4", "-n", "1", "-c", b.conf)
	b.cmd.Stdout, b.cmd.Stderr = b.stderr, b.stderr
	if err := b.cmd.Start(); err != nil {
		b.t.Fatalf("start named: %v", err)
	}
	b.exited = make(chan error, 1)
	go func(cmd *exec.Cmd, exited chan error) { exited <- cmd.Wait() }(b.cmd, b.exited)
	b.running = true
	b.waitForSOA()
}

// Stop ends named gracefully (it writes its journal), as an operator would.
func (b *BIND) Stop() {
	if !b.running {
		return
	}
	_ = b.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-b.exited:
	case <-time.After(10 * time.Second):
		_ = b.cmd.Process.Kill()
		<-b.exited
	}
	b.running = false
}

func findNamed(t testing.TB) string {
	t.Helper()
	if path, err := exec.LookPath("named"); err == nil {
		return path
	}
	for _, path := range []string{"/usr/sbin/named", "/usr/local/sbin/named"} {
		if _, err := os.Stat(path); err == nil {
			return path
		}
	}
	t.Fatal("install BIND 9: apt-get install -y bind9")
	return ""
}

// waitForSOA polls until named answers for the zone, failing early with
// named's log if it exits.
func (b *BIND) waitForSOA() {
	b.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	client := &dns.Client{Net: "tcp", Timeout: 500 * time.Millisecond}
	for time.Now().Before(deadline) {
		select {
		case err := <-b.exited:
			b.running = false
			b.t.Fatalf("named exited (%v):\n%s", err, b.stderr.String())
		default:
		}
		msg := new(dns.Msg)
		msg.SetQuestion(dns.Fqdn(b.Zone), dns.TypeSOA)
		if resp, _, err := client.Exchange(msg, b.Addr); err == nil && resp.Rcode == dns.RcodeSuccess && len(resp.Answer) == 1 {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	b.t.Fatalf("named did not answer on %s within 30s:\n%s", b.Addr, b.stderr.String())
}

// RandomSecret is base64 of 32 random bytes (a TSIG or HMAC secret).
func RandomSecret(t testing.TB) string {
	t.Helper()
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return base64.StdEncoding.EncodeToString(b)
}

func writeFile(t testing.TB, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}
