package smtpserver

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/smtp"
	"net/textproto"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	gosmtp "github.com/emersion/go-smtp"
)

// sink is a backend that keeps what ReadMessage accepts; fail, when set, is
// what Data answers instead.
type sink struct {
	mu   sync.Mutex
	msgs [][]byte
	errs []error
	fail error
}

func (k *sink) NewSession(*gosmtp.Conn) (gosmtp.Session, error) { return &sinkSession{k}, nil }

type sinkSession struct{ k *sink }

func (s *sinkSession) Mail(string, *gosmtp.MailOptions) error { return nil }
func (s *sinkSession) Rcpt(string, *gosmtp.RcptOptions) error { return nil }
func (s *sinkSession) Reset()                                 {}
func (s *sinkSession) Logout() error                          { return nil }
func (s *sinkSession) Data(r io.Reader) error {
	b, err := ReadMessage(r)
	s.k.mu.Lock()
	defer s.k.mu.Unlock()
	if err != nil {
		s.k.errs = append(s.k.errs, err)
		return err
	}
	if s.k.fail != nil {
		return s.k.fail
	}
	s.k.msgs = append(s.k.msgs, b)
	return nil
}

func (k *sink) kept() [][]byte {
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([][]byte(nil), k.msgs...)
}

func start(t *testing.T, cfg Config, k *sink) (*Server, string) {
	t.Helper()
	if cfg.Hostname == "" {
		cfg.Hostname = "mx.test.example"
	}
	srv, err := New(cfg, k)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return srv, ln.Addr().String()
}

// dialText opens a hand-spoken session up to the answer to DATA.
func dialText(t *testing.T, addr string) *textproto.Conn {
	t.Helper()
	c, err := textproto.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	for _, step := range []struct {
		cmd  string
		code int
	}{{"", 220}, {"EHLO client.example", 250}, {"MAIL FROM:<a@client.example>", 250}, {"RCPT TO:<b@mx.test.example>", 250}, {"DATA", 354}} {
		if step.cmd != "" {
			if _, err := c.Cmd("%s", step.cmd); err != nil {
				t.Fatal(err)
			}
		}
		if _, _, err := c.ReadResponse(step.code); err != nil {
			t.Fatalf("%q: %v", step.cmd, err)
		}
	}
	return c
}

// endData writes raw data and the end-of-data line and returns the reply.
func endData(t *testing.T, c *textproto.Conn, data string) string {
	t.Helper()
	if _, err := c.W.WriteString(data + "\r\n.\r\n"); err != nil {
		t.Fatal(err)
	}
	if err := c.W.Flush(); err != nil {
		t.Fatal(err)
	}
	code, msg, _ := c.ReadResponse(0)
	return fmt.Sprintf("%d %s", code, msg)
}

func TestBareLineEndingsAreRefused(t *testing.T) {
	k := &sink{}
	_, addr := start(t, Config{}, k)
	for name, data := range map[string]string{
		"bare LF":        "Subject: a\r\n\r\nline\nline",
		"bare CR":        "Subject: a\r\n\r\nline\rline",
		"LF dot LF":      "Subject: a\r\n\r\nfirst\n.\nMAIL FROM:<x@evil.example>\r\nRCPT TO:<y@victim.example>\r\nDATA\r\nsecond",
		"LF dot CRLF":    "Subject: a\r\n\r\nfirst\n.\r\nMAIL FROM:<x@evil.example>\r\nsecond",
		"CR dot CR":      "Subject: a\r\n\r\nfirst\r.\rMAIL FROM:<x@evil.example>\r\nsecond",
		"CRLF dot LF":    "Subject: a\r\n\r\nfirst\r\n.\nMAIL FROM:<x@evil.example>\r\nsecond",
		"header bare LF": "Subject: a\nX: b\r\n\r\nbody",
	} {
		c := dialText(t, addr)
		if got := endData(t, c, data); !strings.HasPrefix(got, "550 5.6.0") {
			t.Errorf("%s: %q, want 550 5.6.0", name, got)
		}
	}
	if n := len(k.kept()); n != 0 {
		t.Fatalf("%d messages kept from smuggling attempts", n)
	}
	// A clean message passes byte for byte.
	clean := "Subject: a\r\n\r\nline one\r\n..dot-stuffed\r\nline three"
	if got := endData(t, dialText(t, addr), clean); !strings.HasPrefix(got, "250") {
		t.Fatalf("clean message: %q", got)
	}
	if kept := k.kept(); len(kept) != 1 || string(kept[0]) != "Subject: a\r\n\r\nline one\r\n.dot-stuffed\r\nline three\r\n" {
		t.Fatalf("kept %q", kept)
	}
}

func TestSizeLimit(t *testing.T) {
	k := &sink{}
	_, addr := start(t, Config{}, k)
	// n bytes of data in lines of 80; the server keeps the final CRLF too.
	body := func(n int) string {
		var b strings.Builder
		b.WriteString("Subject: big\r\n\r\n")
		for b.Len()+80 <= n {
			b.WriteString(strings.Repeat("a", 78) + "\r\n")
		}
		b.WriteString(strings.Repeat("b", n-b.Len()))
		return b.String()
	}
	// go-smtp counts the message with its final CRLF and refuses it once
	// the count reaches the limit: the largest message is one byte short of
	// 10 MiB.
	largest := body(DefaultMaxMessageBytes - 3)
	if got := endData(t, dialText(t, addr), largest); !strings.HasPrefix(got, "250") {
		t.Fatalf("10 MiB - 1: %q", got)
	}
	if kept := k.kept(); len(kept) != 1 || len(kept[0]) != DefaultMaxMessageBytes-1 {
		t.Fatalf("kept %d messages", len(kept))
	}
	if got := endData(t, dialText(t, addr), largest+"xx"); !strings.HasPrefix(got, "552 5.3.4") {
		t.Fatalf("10 MiB + 1: %q", got)
	}
	if len(k.kept()) != 1 {
		t.Fatal("an oversized message was kept")
	}
}

func TestExtensions(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	writeCert(t, certFile, keyFile, "first")
	for _, withTLS := range []bool{false, true} {
		cfg := Config{}
		if withTLS {
			cfg.TLSCertFile, cfg.TLSKeyFile = certFile, keyFile
		}
		_, addr := start(t, cfg, &sink{})
		c, err := smtp.Dial(addr)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Hello("client.example"); err != nil {
			t.Fatal(err)
		}
		for _, ext := range []string{"PIPELINING", "8BITMIME", "SMTPUTF8", "ENHANCEDSTATUSCODES"} {
			if ok, _ := c.Extension(ext); !ok {
				t.Errorf("%s not advertised", ext)
			}
		}
		if ok, size := c.Extension("SIZE"); !ok || size != "10485760" {
			t.Errorf("SIZE %q", size)
		}
		if ok, _ := c.Extension("STARTTLS"); ok != withTLS {
			t.Errorf("STARTTLS advertised: %v, with a certificate: %v", ok, withTLS)
		}
		c.Close()
	}
}

// writeCert writes a self-signed certificate whose subject names it.
func writeCert(t *testing.T, certFile, keyFile, name string) {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name},
		DNSNames: []string{"mx.test.example"}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, _ := x509.MarshalECPrivateKey(key)
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// peerName does STARTTLS and returns the server certificate's common name.
func peerName(t *testing.T, addr string) string {
	t.Helper()
	c, err := smtp.Dial(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.StartTLS(&tls.Config{InsecureSkipVerify: true}); err != nil { //nolint:gosec // the test reads the certificate it wrote
		t.Fatal(err)
	}
	st, _ := c.TLSConnectionState()
	return st.PeerCertificates[0].Subject.CommonName
}

// A replaced certificate is served from the next handshake on; a broken
// replacement keeps the previous one.
func TestCertificateReload(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	writeCert(t, certFile, keyFile, "first")
	_, addr := start(t, Config{TLSCertFile: certFile, TLSKeyFile: keyFile}, &sink{})
	if got := peerName(t, addr); got != "first" {
		t.Fatalf("certificate %q", got)
	}
	time.Sleep(recheckEvery + 100*time.Millisecond)
	writeCert(t, certFile, keyFile, "second")
	if got := peerName(t, addr); got != "second" {
		t.Fatalf("after renewal: %q", got)
	}
	time.Sleep(recheckEvery + 100*time.Millisecond)
	if err := os.WriteFile(certFile, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := peerName(t, addr); got != "second" {
		t.Fatalf("after a broken replacement: %q", got)
	}
}

func TestConnectionCap(t *testing.T) {
	_, addr := start(t, Config{MaxConnections: 5}, &sink{})
	var held []net.Conn
	read := func(c net.Conn) string {
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		b := make([]byte, 256)
		n, _ := c.Read(b)
		return string(b[:n])
	}
	for range 5 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		if g := read(c); !strings.HasPrefix(g, "220") {
			t.Fatalf("greeting %q", g)
		}
		held = append(held, c)
	}
	extra, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	if g := read(extra); !strings.HasPrefix(g, "421 4.7.0") {
		t.Fatalf("over the cap: %q", g)
	}
	if _, err := extra.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		t.Fatalf("the refused connection stays open: %v", err)
	}
	held[0].Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		g := read(c)
		c.Close()
		if strings.HasPrefix(g, "220") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no slot after a close: %q", g)
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, c := range held[1:] {
		c.Close()
	}
}

func TestIdleTimeoutAndUnavailable(t *testing.T) {
	k := &sink{fail: ErrUnavailable}
	_, addr := start(t, Config{IdleTimeout: time.Second}, k)
	if got := endData(t, dialText(t, addr), "Subject: a\r\n\r\nb"); !strings.HasPrefix(got, "451 4.3.0") {
		t.Fatalf("unavailable: %q", got)
	}
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	all, _ := io.ReadAll(c) // the greeting, then the server closes
	if !bytes.HasPrefix(all, []byte("220")) {
		t.Fatalf("read %q", all)
	}
}

// A client that stops in the middle of DATA leaves nothing kept: the
// session's read fails.
func TestClientGoneMidData(t *testing.T) {
	k := &sink{}
	_, addr := start(t, Config{}, k)
	c := dialText(t, addr)
	_, _ = c.W.WriteString("Subject: half\r\n\r\npart of a body")
	_ = c.W.Flush()
	c.Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		k.mu.Lock()
		n := len(k.errs)
		k.mu.Unlock()
		if n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the session never saw the dropped connection")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if len(k.kept()) != 0 {
		t.Fatal("half a message was kept")
	}
}

func FuzzReadMessage(f *testing.F) {
	for _, s := range []string{"a\r\nb\r\n", "a\nb", "a\rb", "\r", "\n", "\r\n", "x\r\r\n", ""} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		got := HasBareLineEnding(b)
		// The reference: every CR is followed by LF, every LF preceded by CR.
		want := false
		for i, c := range b {
			if c == '\r' && (i+1 == len(b) || b[i+1] != '\n') || c == '\n' && (i == 0 || b[i-1] != '\r') {
				want = true
			}
		}
		if got != want {
			t.Fatalf("HasBareLineEnding(%q) = %v, want %v", b, got, want)
		}
		if _, err := ReadMessage(bytes.NewReader(b)); (err != nil) != want {
			t.Fatalf("ReadMessage(%q): %v", b, err)
		}
	})
}
