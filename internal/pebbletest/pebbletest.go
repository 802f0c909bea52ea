// Package pebbletest runs Pebble, Let's Encrypt's ACME test server (make
// pebble builds bin/pebble), for the tests of the custom tracking domains'
// certificates (internal/trackingtls): a real CA that really validates
// TLS-ALPN-01 challenges by connecting to the listener under test.
//
// Each Pebble is the test's own: free loopback ports, an HTTPS certificate
// made for it at test time, and a DNS server of the test's own that resolves
// the test's host names to 127.0.0.1, so the validation connects to the
// listener on 127.0.0.1:TLSPort. Validation is never skipped
// (PEBBLE_VA_ALWAYS_VALID and PEBBLE_AUTHZREUSE are not passed on); only its
// artificial sleeps and nonce rejections are turned off.
package pebbletest

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mailyard/mailyard/internal/freeport"
	"github.com/mailyard/mailyard/internal/testenv"
)

// Binary is where make pebble puts Pebble, relative to the repository root.
const Binary = "bin/pebble"

// BinaryEnv, when set, is the path of the pebble binary to run instead of
// bin/pebble (a checkout whose bin/ is elsewhere).
const BinaryEnv = "MAILYARD_PEBBLE"

// Options of Start.
type Options struct {
	// TLSPort is the port Pebble connects to on 127.0.0.1 to validate
	// TLS-ALPN-01 challenges: the listener under test.
	TLSPort int
	// Hosts are the names the DNS server resolves to 127.0.0.1 (A; no AAAA).
	// Other names do not exist.
	Hosts []string
}

// Pebble is a running Pebble.
type Pebble struct {
	// DirectoryURL is the ACME directory.
	DirectoryURL string
	// HTTPClient trusts Pebble's HTTPS certificate (ACME and management).
	HTTPClient *http.Client
	// Roots holds Pebble's issuing root: issued certificates verify
	// against it.
	Roots *x509.CertPool
	// ManagementURL is the base of the management interface.
	ManagementURL string
	// DNSAddr is the DNS server Pebble resolves names with.
	DNSAddr string
	// CAFile is a PEM file of the CA of Pebble's HTTPS certificate, for a
	// process that talks to Pebble (MAILYARD_ACME_CA).
	CAFile string

	output *testenv.SyncBuffer
}

// Output is what Pebble logged so far.
func (p *Pebble) Output() string { return p.output.String() }

// Start runs Pebble until the test ends. Without the binary the test is
// skipped, except under CI (CI set), where it fails.
func Start(t testing.TB, o Options) *Pebble {
	t.Helper()
	bin, err := FindBinary()
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	if o.TLSPort == 0 {
		t.Fatal("pebbletest: Options.TLSPort is required")
	}
	dir := t.TempDir()

	zone := testenv.StartDNSZone(t)
	for _, h := range o.Hosts {
		zone.Add(t, strings.TrimSuffix(strings.ToLower(h), ".")+". 60 IN A 127.0.0.1")
	}

	ca, certFile, keyFile := writeServerCert(t, dir)
	// Pebble binds these itself: listen, management, and the HTTP-01 port
	// nobody serves (only TLS-ALPN-01 is used).
	ports, err := freeport.Ports("127.0.0.1", 3)
	if err != nil {
		t.Fatal(err)
	}
	listen := net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0]))
	management := net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[1]))
	cfg := map[string]any{"pebble": map[string]any{
		"listenAddress":                  listen,
		"managementListenAddress":        management,
		"certificate":                    certFile,
		"privateKey":                     keyFile,
		"httpPort":                       ports[2],
		"tlsPort":                        o.TLSPort,
		"ocspResponderURL":               "",
		"externalAccountBindingRequired": false,
		"keyAlgorithm":                   "ecdsa",
		// The least Pebble asks clients to wait between polls.
		"retryAfter": map[string]int{"authz": 1, "order": 1},
	}}
	cfgJSON, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	cfgFile := filepath.Join(dir, "pebble-config.json")
	if err := os.WriteFile(cfgFile, cfgJSON, 0o600); err != nil {
		t.Fatal(err)
	}

	p := &Pebble{
		DirectoryURL:  "https://" + listen + "/dir",
		ManagementURL: "https://" + management,
		DNSAddr:       zone.Addr,
		CAFile:        filepath.Join(dir, "ca.pem"),
		output:        &testenv.SyncBuffer{},
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	writePEM(t, p.CAFile, "CERTIFICATE", ca.Raw)
	p.HTTPClient = &http.Client{Transport: tr, Timeout: 30 * time.Second}
	t.Cleanup(tr.CloseIdleConnections)

	cmd := exec.Command(bin, "-config", cfgFile, "-dnsserver", zone.Addr)
	cmd.Dir = dir
	cmd.Env = environ()
	cmd.Stdout, cmd.Stderr = p.output, p.output
	// Killed with its parent, so a crashed test leaves no server behind.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start pebble: %v", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		if t.Failed() {
			t.Logf("Pebble's log:\n%s", p.Output())
		}
	})

	p.waitReady(t, exited)
	p.Roots = p.fetchRoot(t)
	return p
}

// environ is the test's environment for Pebble, without any PEBBLE_ setting
// of the caller's (PEBBLE_VA_ALWAYS_VALID would skip the validation the tests
// are about), with validation's sleeps and bad-nonce rejections off.
func environ() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PEBBLE_") {
			env = append(env, kv)
		}
	}
	return append(env, "PEBBLE_VA_NOSLEEP=1", "PEBBLE_WFE_NONCEREJECT=0")
}

// waitReady polls the directory until Pebble answers, failing early with its
// log if it exits.
func (p *Pebble) waitReady(t testing.TB, exited <-chan struct{}) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		select {
		case <-exited:
			t.Fatalf("pebble exited while starting:\n%s", p.Output())
		default:
		}
		resp, err := p.HTTPClient.Get(p.DirectoryURL)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
			err = fmt.Errorf("status %s", resp.Status)
		}
		if time.Now().After(deadline) {
			t.Fatalf("pebble did not answer at %s within 30s (%v):\n%s", p.DirectoryURL, err, p.Output())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// fetchRoot reads Pebble's issuing root from the management interface. It is
// made when Pebble starts, so each Pebble has its own.
func (p *Pebble) fetchRoot(t testing.TB) *x509.CertPool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.ManagementURL+"/roots/0", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := p.HTTPClient.Do(req)
	if err != nil {
		t.Fatalf("pebble root: %v", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("pebble root: %s %v\n%s", resp.Status, err, body)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(body) {
		t.Fatalf("pebble root is not a PEM certificate:\n%s", body)
	}
	return pool
}

// FindBinary returns $MAILYARD_PEBBLE, or bin/pebble in the working directory
// or the nearest parent that has one (tests run in their package's
// directory).
func FindBinary() (string, error) {
	if path := os.Getenv(BinaryEnv); path != "" {
		if !isFile(path) {
			return "", fmt.Errorf("%s=%s: no such file", BinaryEnv, path)
		}
		return path, nil
	}
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if path := filepath.Join(dir, Binary); isFile(path) {
			return path, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no " + Binary + " (Pebble, the ACME test server): run make pebble")
		}
		dir = parent
	}
}

func isFile(path string) bool {
	st, err := os.Stat(path)
	return err == nil && !st.IsDir()
}

// writeServerCert makes a CA of this Pebble's own and, signed by it, the
// certificate Pebble serves HTTPS with (for 127.0.0.1 and localhost), writes
// the certificate and its key as PEM into dir and returns the CA.
func writeServerCert(t testing.TB, dir string) (ca *x509.Certificate, certFile, keyFile string) {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber:          serial(t),
		Subject:               pkix.Name{CommonName: "pebbletest CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	if ca, err = x509.ParseCertificate(caDER); err != nil {
		t.Fatal(err)
	}

	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(t),
		Subject:      pkix.Name{CommonName: "localhost"},
		DNSNames:     []string{"localhost"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	writePEM(t, certFile, "CERTIFICATE", der)
	writePEM(t, keyFile, "PRIVATE KEY", keyDER)
	return ca, certFile, keyFile
}

func serial(t testing.TB) *big.Int {
	t.Helper()
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func writePEM(t testing.TB, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}
