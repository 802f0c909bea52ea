package smtpserver

import (
	"bufio"
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"log/slog"
	"math/big"
	"net"
	netsmtp "net/smtp"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// testCA signs leaf certificates for mx.mailyard.test.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pool *x509.CertPool
}

func newTestCA(t *testing.T) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "Mailyard test CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &testCA{cert: cert, key: key, pool: pool}
}

// issue writes a certificate with the given serial and its key as PEM files
// under dir, through a rename as certificate tools do, and returns the paths.
func (ca *testCA) issue(t *testing.T, dir string, serial int64) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial),
		Subject:      pkix.Name{CommonName: "mx.mailyard.test"},
		DNSNames:     []string{"mx.mailyard.test"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	replace(t, certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
	replace(t, keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}))
	return certFile, keyFile
}

func replace(t *testing.T, name string, data []byte) {
	t.Helper()
	tmp := name + ".new"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, name); err != nil {
		t.Fatal(err)
	}
}

// logBuffer collects what the Server logs.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func (ca *testCA) clientConfig() *tls.Config {
	return &tls.Config{RootCAs: ca.pool, ServerName: "mx.mailyard.test"}
}

// startTLSSerial does STARTTLS with net/smtp and returns the serial of the
// certificate the server presented.
func startTLSSerial(t *testing.T, addr string, ca *testCA) int64 {
	t.Helper()
	c, err := netsmtp.Dial(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if ok, _ := c.Extension("STARTTLS"); !ok {
		t.Fatal("STARTTLS not offered with a certificate")
	}
	if err := c.StartTLS(ca.clientConfig()); err != nil {
		t.Fatal(err)
	}
	if ok, _ := c.Extension("STARTTLS"); ok {
		t.Error("STARTTLS offered again under TLS")
	}
	state, ok := c.TLSConnectionState()
	if !ok {
		t.Fatal("no TLS after STARTTLS")
	}
	if state.Version < tls.VersionTLS12 {
		t.Errorf("TLS version %x", state.Version)
	}
	return state.PeerCertificates[0].SerialNumber.Int64()
}

func TestSTARTTLSReloadsTheCertificate(t *testing.T) {
	ca := newTestCA(t)
	dir := t.TempDir()
	certFile, keyFile := ca.issue(t, dir, 100)
	var logs logBuffer
	b := newBackend()
	s, addr := start(t, Config{TLSCertFile: certFile, TLSKeyFile: keyFile, Logger: slog.New(slog.NewTextHandler(&logs, nil))}, b)
	setInterval := func(d time.Duration) {
		s.certs.mu.Lock()
		s.certs.interval = d
		s.certs.mu.Unlock()
	}

	if got := startTLSSerial(t, addr, ca); got != 100 {
		t.Fatalf("serial %d, want 100", got)
	}

	// Within the interval the files are not looked at.
	setInterval(time.Hour)
	ca.issue(t, dir, 101)
	if got := startTLSSerial(t, addr, ca); got != 100 {
		t.Fatalf("serial %d within the interval, want 100", got)
	}

	setInterval(0)
	if got := startTLSSerial(t, addr, ca); got != 101 {
		t.Fatalf("serial %d after renewal, want 101", got)
	}
	if !strings.Contains(logs.String(), "reloaded TLS certificate") {
		t.Errorf("reload not logged: %s", logs.String())
	}

	// A broken renewal (key of another certificate) keeps the old one.
	_, otherKey := ca.issue(t, t.TempDir(), 102)
	key, err := os.ReadFile(otherKey)
	if err != nil {
		t.Fatal(err)
	}
	replace(t, keyFile, key)
	if got := startTLSSerial(t, addr, ca); got != 101 {
		t.Fatalf("serial %d after a broken renewal, want 101", got)
	}
	if !strings.Contains(logs.String(), "cannot load the changed TLS certificate") {
		t.Errorf("broken renewal not logged: %s", logs.String())
	}
	// And garbage too.
	replace(t, certFile, []byte("not a certificate"))
	if got := startTLSSerial(t, addr, ca); got != 101 {
		t.Fatalf("serial %d after garbage, want 101", got)
	}

	// Mail still goes through under TLS.
	c, err := netsmtp.Dial(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.StartTLS(ca.clientConfig()); err != nil {
		t.Fatal(err)
	}
	if err := c.Mail("a@client.test"); err != nil {
		t.Fatal(err)
	}
	if err := c.Rcpt("b@mx.mailyard.test"); err != nil {
		t.Fatal(err)
	}
	w, err := c.Data()
	if err != nil {
		t.Fatal(err)
	}
	w.Write([]byte("Subject: tls\r\n\r\nhi\r\n"))
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if got := b.delivered(); len(got) != 1 {
		t.Fatalf("delivered %q", got)
	}
}

func TestTLS11IsRefused(t *testing.T) {
	ca := newTestCA(t)
	certFile, keyFile := ca.issue(t, t.TempDir(), 1)
	_, addr := start(t, Config{TLSCertFile: certFile, TLSKeyFile: keyFile}, newBackend())
	c, err := netsmtp.Dial(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cfg := ca.clientConfig()
	cfg.MaxVersion = tls.VersionTLS11
	if err := c.StartTLS(cfg); err == nil {
		t.Fatal("TLS 1.1 handshake succeeded")
	}
}

func TestServeTLS(t *testing.T) {
	ca := newTestCA(t)
	certFile, keyFile := ca.issue(t, t.TempDir(), 7)
	var logs logBuffer
	b := newBackend()
	s, err := New(Config{Hostname: "mx.mailyard.test", TLSCertFile: certFile, TLSKeyFile: keyFile,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))}, b)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- s.ServeTLS(ln) }()
	defer func() {
		s.Close()
		if err := <-served; err != nil {
			t.Errorf("ServeTLS: %v", err)
		}
	}()

	conn, err := tls.Dial("tcp", ln.Addr().String(), ca.clientConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if got := conn.ConnectionState().PeerCertificates[0].SerialNumber.Int64(); got != 7 {
		t.Fatalf("serial %d", got)
	}
	c := &client{t: t, conn: conn, r: bufio.NewReader(conn)}
	c.expect("220 mx.mailyard.test ")
	c.send("EHLO client.test\r\n")
	_, lines := c.reply()
	if contains(lines, "STARTTLS") {
		t.Error("STARTTLS offered on implicit TLS")
	}

	// A client that does not speak TLS fails, and go-smtp's complaint
	// reaches the slog.Logger.
	plain := dial(t, ln.Addr().String())
	plain.send("EHLO client.test\r\n")
	plain.closed(5 * time.Second)
	eventually(t, func() bool { return strings.Contains(logs.String(), "smtp server: error handling") })

	// Without a certificate there is no implicit TLS.
	noCert, err := New(Config{Hostname: "mx.mailyard.test"}, b)
	if err != nil {
		t.Fatal(err)
	}
	if err := noCert.ServeTLS(ln); err == nil {
		t.Fatal("ServeTLS without a certificate")
	}
}
