package dnspublish

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

	"github.com/mailyard/mailyard/internal/testenv"
)

const testZone = "dkim.mailyard.test"

// bindServer is a BIND 9 primary for testZone, run in the foreground for
// one test.
type bindServer struct {
	addr string
	// updateKey may update the zone; otherKey is known to the server but
	// has no update rights.
	updateKey, otherKey string // name:algorithm:secret
}

// startBIND runs named with a zone that accepts dynamic updates signed with
// a fresh TSIG key. CI installs BIND, so a missing named fails the test
// rather than skipping it.
func startBIND(t *testing.T) *bindServer {
	t.Helper()
	named := findNamed(t)
	dir := t.TempDir()
	port := freePort(t)

	updateSecret, otherSecret := randomSecret(t), randomSecret(t)
	zoneFile := filepath.Join(dir, testZone+".db")
	writeFile(t, zoneFile, fmt.Sprintf(`$TTL 300
@	IN SOA ns1.%[1]s. hostmaster.%[1]s. 1 3600 600 604800 60
@	IN NS ns1.%[1]s.
ns1	IN A 127.0.0.1
`, testZone))
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
`, dir, port, updateSecret, otherSecret, testZone, zoneFile))

	var stderr testenv.SyncBuffer
	cmd := exec.Command(named, "-g", "-4", "-n", "1", "-c", conf)
	cmd.Stdout, cmd.Stderr = &stderr, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("start named: %v", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	})

	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	waitForSOA(t, addr, exited, &stderr)
	return &bindServer{
		addr:      addr,
		updateKey: "mailyard-update:hmac-sha256:" + updateSecret,
		otherKey:  "mailyard-other:hmac-sha256:" + otherSecret,
	}
}

func findNamed(t *testing.T) string {
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
func waitForSOA(t *testing.T, addr string, exited <-chan error, log *testenv.SyncBuffer) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	client := &dns.Client{Net: "tcp", Timeout: 500 * time.Millisecond}
	for time.Now().Before(deadline) {
		select {
		case err := <-exited:
			t.Fatalf("named exited (%v):\n%s", err, log.String())
		default:
		}
		msg := new(dns.Msg)
		msg.SetQuestion(testZone+".", dns.TypeSOA)
		if resp, _, err := client.Exchange(msg, addr); err == nil && resp.Rcode == dns.RcodeSuccess && len(resp.Answer) == 1 {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("named did not answer on %s within 30s:\n%s", addr, log.String())
}

func freePort(t *testing.T) int {
	t.Helper()
	// named needs the port free for both UDP and TCP.
	for range 20 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		pc, err := net.ListenPacket("udp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		l.Close()
		if err == nil {
			pc.Close()
			return port
		}
	}
	t.Fatal("no free port for both UDP and TCP")
	return 0
}

func randomSecret(t *testing.T) string {
	t.Helper()
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return base64.StdEncoding.EncodeToString(b)
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}
