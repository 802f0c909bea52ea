package smtpsend_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"io"
	"math/big"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/emersion/go-sasl"
	"github.com/emersion/go-smtp"
)

// received is one message a test server accepted.
type received struct {
	from  string
	rcpts []string
	data  []byte
	tls   bool
	user  string // authenticated as
	utf8  bool   // MAIL FROM had SMTPUTF8
}

// testServer is a real SMTP server (go-smtp) on loopback whose answers the
// test chooses, recording what it saw.
type testServer struct {
	t    *testing.T
	addr string
	port int

	// Hooks, set before the first connection; nil accepts.
	onMail func(from string) error
	onRcpt func(to string) error
	onData func(c *smtp.Conn) error
	// username and password, when set, are required before MAIL.
	username, password string
	// perConnection, when set, is the most messages a connection takes:
	// the next MAIL gets 421, as from a receiver that limits them.
	perConnection int

	mu       sync.Mutex
	conns    int
	mails    int // MAIL commands
	helos    []string
	messages []received
}

type serverOptions struct {
	host        string      // listen address; 127.0.0.1 when empty
	port        int         // 0 = any free port
	startTLS    *tls.Config // offer STARTTLS with this configuration
	implicitTLS *tls.Config // speak TLS from the first byte
	smtputf8    bool        // advertise SMTPUTF8
}

func startServer(t *testing.T, opts serverOptions) *testServer {
	t.Helper()
	host := opts.host
	if host == "" {
		host = "127.0.0.1"
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(opts.port)))
	if err != nil {
		t.Fatal(err)
	}
	s := &testServer{t: t, addr: ln.Addr().String(), port: ln.Addr().(*net.TCPAddr).Port}
	var l net.Listener = &countingListener{Listener: ln, s: s}
	if opts.implicitTLS != nil {
		l = tls.NewListener(l, opts.implicitTLS)
	}
	srv := smtp.NewServer(smtp.BackendFunc(func(c *smtp.Conn) (smtp.Session, error) {
		s.mu.Lock()
		s.helos = append(s.helos, c.Hostname())
		s.mu.Unlock()
		return &testSession{s: s, conn: c}, nil
	}))
	srv.Domain = "test-server"
	srv.TLSConfig = opts.startTLS
	srv.AllowInsecureAuth = true
	srv.EnableSMTPUTF8 = opts.smtputf8
	srv.ErrorLog = nopLog{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(l)
	}()
	t.Cleanup(func() {
		_ = srv.Close()
		_ = l.Close() // in case Serve has not registered it yet
		<-done
	})
	return s
}

func (s *testServer) stats() (conns, mails int, messages []received, helos []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.conns, s.mails, append([]received(nil), s.messages...), append([]string(nil), s.helos...)
}

type countingListener struct {
	net.Listener
	s *testServer
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.s.mu.Lock()
		l.s.conns++
		l.s.mu.Unlock()
	}
	return c, err
}

type testSession struct {
	s     *testServer
	conn  *smtp.Conn
	user  string
	from  string
	rcpts []string
	taken int // messages taken on this connection
	utf8  bool
}

func (ss *testSession) AuthMechanisms() []string {
	if ss.s.username == "" {
		return nil
	}
	return []string{sasl.Plain}
}

func (ss *testSession) Auth(string) (sasl.Server, error) {
	return sasl.NewPlainServer(func(identity, username, password string) error {
		if username != ss.s.username || password != ss.s.password {
			return smtp.ErrAuthFailed
		}
		ss.user = username
		return nil
	}), nil
}

func (ss *testSession) Mail(from string, opts *smtp.MailOptions) error {
	ss.s.mu.Lock()
	ss.s.mails++
	ss.s.mu.Unlock()
	if ss.s.username != "" && ss.user == "" {
		return smtp.ErrAuthRequired
	}
	if ss.s.perConnection > 0 && ss.taken == ss.s.perConnection {
		return smtpError(421, smtp.EnhancedCode{4, 7, 0}, "too many messages on this connection")
	}
	if ss.s.onMail != nil {
		if err := ss.s.onMail(from); err != nil {
			return err
		}
	}
	ss.from, ss.utf8 = from, opts != nil && opts.UTF8
	return nil
}

func (ss *testSession) Rcpt(to string, _ *smtp.RcptOptions) error {
	if ss.s.onRcpt != nil {
		if err := ss.s.onRcpt(to); err != nil {
			return err
		}
	}
	ss.rcpts = append(ss.rcpts, to)
	return nil
}

func (ss *testSession) Data(r io.Reader) error {
	data, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	if ss.s.onData != nil {
		if err := ss.s.onData(ss.conn); err != nil {
			return err
		}
	}
	_, isTLS := ss.conn.TLSConnectionState()
	ss.s.mu.Lock()
	ss.s.messages = append(ss.s.messages, received{from: ss.from, rcpts: ss.rcpts, data: data, tls: isTLS, user: ss.user, utf8: ss.utf8})
	ss.s.mu.Unlock()
	ss.taken++
	return nil
}

func (ss *testSession) Reset() {
	ss.from, ss.rcpts = "", nil
}

func (ss *testSession) Logout() error { return nil }

type nopLog struct{}

func (nopLog) Printf(string, ...any) {}
func (nopLog) Println(...any)        {}

func smtpError(code int, enhanced smtp.EnhancedCode, msg string) error {
	return &smtp.SMTPError{Code: code, EnhancedCode: enhanced, Message: msg}
}

// testPKI is a certificate authority and a server certificate it issued.
type testPKI struct {
	pool   *x509.CertPool
	server tls.Certificate
}

func newTestPKI(t *testing.T, dnsNames []string, ips []net.IP) testPKI {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTemplate := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "Mailyard test CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTemplate, caTemplate, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	leafTemplate := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: dnsNames[0]},
		DNSNames:     dnsNames,
		IPAddresses:  ips,
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	leafDER, err := x509.CreateCertificate(rand.Reader, leafTemplate, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	return testPKI{pool: pool, server: tls.Certificate{Certificate: [][]byte{leafDER}, PrivateKey: key}}
}

func (p testPKI) serverConfig() *tls.Config {
	return &tls.Config{Certificates: []tls.Certificate{p.server}, MinVersion: tls.VersionTLS12}
}
