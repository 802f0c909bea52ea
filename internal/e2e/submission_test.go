package e2e

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/smtp"
	"net/textproto"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mailyard/mailyard/internal/testenv"
)

// smtpCert writes a certificate for 127.0.0.1 and submission.test signed by
// a CA of the test's own, and returns the files and the CA's pool.
func smtpCert(t *testing.T) (certFile, keyFile string, roots *x509.CertPool) {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "e2e CA"}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "submission.test"}, DNSNames: []string{"submission.test"},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	kder, _ := x509.MarshalECPrivateKey(key)
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "ca.pem"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	roots = x509.NewCertPool()
	roots.AddCert(ca)
	return certFile, keyFile, roots
}

// startSubmission starts `mailyard submission` with STARTTLS and implicit
// TLS listeners.
func (s *stack) startSubmission(certFile, keyFile string) (addr, tlsAddr string) {
	s.t.Helper()
	addr, tlsAddr = testenv.FreeAddr(s.t), testenv.FreeAddr(s.t)
	testenv.Start(s.t, slices.Concat(s.env, []string{
		"MAILYARD_SUBMISSION_ADDR=" + addr, "MAILYARD_SUBMISSION_TLS_ADDR=" + tlsAddr,
		"MAILYARD_SMTP_TLS_CERT=" + certFile, "MAILYARD_SMTP_TLS_KEY=" + keyFile,
		"MAILYARD_METRICS_ADDR=" + testenv.FreeAddr(s.t),
	}), "submission")
	testenv.WaitListening(s.t, addr, 30*time.Second)
	testenv.WaitListening(s.t, tlsAddr, 30*time.Second)
	return addr, tlsAddr
}

// submitted is a message as an application writes it: a Bcc field, no Date
// and no Message-ID, a body whose bytes must arrive unchanged.
func submitted(subject string) string {
	return "From: Shop <billing@shop.example>\r\n" +
		"To: ada@rcpt.example\r\n" +
		"Bcc: hidden@rcpt.example\r\n" +
		"Subject: " + subject + "\r\n" +
		"MIME-Version: 1.0\r\n" +
		"Content-Type: text/plain; charset=utf-8\r\n" +
		"\r\n" +
		"Hello from an application.\r\n" +
		"..a line that starts with a dot\r\n" +
		"   trailing spaces kept   \r\n"
}

var queuedAs = regexp.MustCompile(`250[ -]2\.0\.0 queued as ([0-9a-f-]{36})`)

// Applications send with clients nobody here wrote — Python's smtplib
// (STARTTLS with AUTH PLAIN and with AUTH LOGIN), swaks (implicit TLS), Go's
// net/smtp — through `mailyard submission` on PostgreSQL and Temporal; each
// message reaches the recipients' server with its body bytes unchanged,
// without its Bcc field, with Date and Message-ID added, and a DKIM
// signature that verifies.
func TestSubmissionEndToEnd(t *testing.T) {
	t.Parallel()
	if exec.Command("swaks", "--version").Run() != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("swaks is not installed (apt-get install swaks); .ci/run installs it")
		}
		t.Skip("swaks is not installed (apt-get install swaks)")
	}
	mx := startMX(t)
	s := startStack(t, topology{env: append(mx.env(), "MAILYARD_VERIFY_SCHEDULE=1s/60s")})
	s.customer.Forward("dkim.mailyard.test", s.dnsAddr)
	mx.route(t, s.customer)
	certFile, keyFile, roots := smtpCert(t)
	addr, tlsAddr := s.startSubmission(certFile, keyFile)
	domainID, sel, _ := verifiedDomain(t, s, "shop.example")
	cred := s.api().createCredential(domainID, "app", "send")
	user, secret := cred.Credential.Username, cred.SecretKey

	caFile := filepath.Join(filepath.Dir(certFile), "ca.pem")
	var ids []string
	// Python's smtplib, STARTTLS, AUTH PLAIN and AUTH LOGIN.
	for _, mech := range []string{"PLAIN", "LOGIN"} {
		script := `
import smtplib, ssl, sys
host, port, ca, user, secret, mech, msg = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5], sys.argv[6], sys.stdin.buffer.read()
s = smtplib.SMTP(host, port)
s.starttls(context=ssl.create_default_context(cafile=ca))
s.ehlo()
s.user, s.password = user, secret
s.auth(mech, s.auth_plain if mech == "PLAIN" else s.auth_login)
s.mail("billing@shop.example")
s.rcpt("ada@rcpt.example")
s.rcpt("hidden@rcpt.example")
code, text = s.data(msg)
print(code, text.decode())
s.quit()
`
		host, port, _ := net.SplitHostPort(addr)
		cmd := exec.Command("/usr/bin/python3", "-c", script, host, port, caFile, user, secret, mech)
		cmd.Stdin = strings.NewReader(submitted("via smtplib " + mech))
		out, err := cmd.CombinedOutput()
		m := regexp.MustCompile(`250 2\.0\.0 queued as ([0-9a-f-]{36})`).FindSubmatch(out)
		if err != nil || m == nil {
			t.Fatalf("smtplib AUTH %s: %v\n%s", mech, err, out)
		}
		ids = append(ids, string(m[1]))
	}
	// swaks over implicit TLS.
	msgFile := filepath.Join(t.TempDir(), "msg.eml")
	if err := os.WriteFile(msgFile, []byte(submitted("via swaks")), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("swaks", "--server", tlsAddr, "--tlsc", "--auth", "PLAIN", "--auth-user", user, "--auth-password", secret,
		"--from", "billing@shop.example", "--to", "ada@rcpt.example,hidden@rcpt.example", "--data", "@"+msgFile).CombinedOutput()
	m := queuedAs.FindSubmatch(out)
	if err != nil || m == nil {
		t.Fatalf("swaks: %v\n%s", err, out)
	}
	ids = append(ids, string(m[1]))
	// Go's net/smtp, STARTTLS, AUTH PLAIN.
	c, err := smtp.Dial(addr)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.StartTLS(&tls.Config{ServerName: "submission.test", RootCAs: roots}); err != nil {
		t.Fatal(err)
	}
	if err := c.Auth(smtp.PlainAuth("", user, secret, "127.0.0.1")); err != nil {
		t.Fatal(err)
	}
	if err := c.Mail("billing@shop.example"); err != nil {
		t.Fatal(err)
	}
	for _, r := range []string{"ada@rcpt.example", "hidden@rcpt.example"} {
		if err := c.Rcpt(r); err != nil {
			t.Fatal(err)
		}
	}
	w, err := c.Data()
	if err != nil {
		t.Fatal(err)
	}
	_, _ = w.Write([]byte(submitted("via net/smtp")))
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	_ = c.Quit()

	for _, e := range s.api().emails("").Emails {
		if e.Subject == "via net/smtp" {
			ids = append(ids, e.ID)
		}
	}
	if len(ids) != 4 {
		t.Fatalf("emails %v", ids)
	}
	wantBody := submitted("")[strings.Index(submitted(""), "\r\n\r\n"):]
	for _, id := range ids {
		var got Email
		testenv.Eventually(t, 30*time.Second, "email "+id+" sent", func() bool {
			got = s.api().email(id)
			return got.Status == "sent"
		})
		if got.Source != "smtp" || deref(got.MessageIDHeader) != "<"+id+"@shop.example>" || got.From != "Shop <billing@shop.example>" {
			t.Fatalf("email %+v", got)
		}
		for _, r := range got.Recipients {
			if r.Status != "delivered" {
				t.Fatalf("recipient %+v", r)
			}
		}
	}
	for _, rcpt := range []string{"ada@rcpt.example", "hidden@rcpt.example"} {
		msgs := mx.received(rcpt)
		if len(msgs) != 4 {
			t.Fatalf("%s received %d messages", rcpt, len(msgs))
		}
		for _, msg := range msgs {
			// swaks ends its data with one more CRLF of its own.
			_, body, _ := bytes.Cut(msg, []byte("\r\n\r\n"))
			if b := "\r\n\r\n" + string(body); b != wantBody && b != wantBody+"\r\n" {
				t.Fatalf("the body changed on its way:\n%q", msg)
			}
			for _, needle := range []string{"Bcc:", "hidden@"} {
				if bytes.Contains(msg, []byte(needle)) {
					t.Fatalf("the message shows %q", needle)
				}
			}
			if !bytes.Contains(msg, []byte("\r\nDate: ")) || !bytes.Contains(msg, []byte("Message-ID: <")) {
				t.Fatalf("no Date or Message-ID added:\n%s", msg)
			}
			assertDKIM(t, s, msg, "shop.example", sel)
		}
	}
}

// smtpSession speaks to a submission listener by hand.
type smtpSession struct {
	t    *testing.T
	conn net.Conn
	c    *textproto.Conn
}

func dialSubmission(t *testing.T, addr string) *smtpSession {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	s := &smtpSession{t: t, conn: conn, c: textproto.NewConn(conn)}
	s.expect("", "220")
	return s
}

// expect sends cmd (none when empty) and checks the reply starts with want.
func (s *smtpSession) expect(cmd, want string) string {
	s.t.Helper()
	if cmd != "" {
		if _, err := s.c.Cmd("%s", cmd); err != nil {
			s.t.Fatal(err)
		}
	}
	code, msg, err := s.c.ReadResponse(0)
	got := fmt.Sprintf("%d %s", code, msg)
	if err != nil && code == 0 {
		got = err.Error()
	}
	if !strings.HasPrefix(got, want) {
		s.t.Fatalf("%q: %q, want %s", cmd, got, want)
	}
	return got
}

func (s *smtpSession) startTLS(roots *x509.CertPool) {
	s.t.Helper()
	s.expect("STARTTLS", "220")
	s.conn = tls.Client(s.conn, &tls.Config{ServerName: "submission.test", RootCAs: roots})
	s.c = textproto.NewConn(s.conn)
	s.expect("EHLO client.example", "250")
}

// plain is an AUTH PLAIN initial response.
func plain(user, secret string) string {
	return base64.StdEncoding.EncodeToString([]byte("\x00" + user + "\x00" + secret))
}

// Abuse and mistakes, through the real process: AUTH before TLS, wrong and
// revoked keys, three failures, keys without send or of another
// organization, other domains in MAIL FROM and From, 51 recipients, 8-bit
// headers without SMTPUTF8, bare LF, a client gone mid-DATA.
func TestSubmissionRefusals(t *testing.T) {
	t.Parallel()
	s := startStack(t, topology{env: []string{"MAILYARD_VERIFY_SCHEDULE=1s/60s"}})
	s.customer.Forward("dkim.mailyard.test", s.dnsAddr)
	certFile, keyFile, roots := smtpCert(t)
	addr, _ := s.startSubmission(certFile, keyFile)
	domainID, _, _ := verifiedDomain(t, s, "shop.example")
	newKey := func(perms ...string) (string, string, int64) {
		c := s.api().createCredential(domainID, "k", perms...)
		return c.Credential.Username, c.SecretKey, c.Credential.ID
	}
	user, secret, keyID := newKey("send")
	statsUser, statsSecret, _ := newKey("stats")

	// Before STARTTLS: no AUTH offered, and AUTH is refused.
	c := dialSubmission(t, addr)
	if ehlo := c.expect("EHLO client.example", "250"); strings.Contains(ehlo, "AUTH") || !strings.Contains(ehlo, "STARTTLS") {
		t.Fatalf("EHLO before TLS: %q", ehlo)
	}
	c.expect("AUTH PLAIN "+plain(user, secret), "530 5.7.0")
	c.expect("MAIL FROM:<billing@shop.example>", "530 5.7.0")

	// Three failures close the connection.
	c.startTLS(roots)
	c.expect("AUTH PLAIN "+plain(user, "myk_wrong"), "535 5.7.8")
	c.expect("AUTH PLAIN "+plain(statsUser, statsSecret), "535 5.7.8") // no send permission
	c.expect("AUTH PLAIN "+plain("someone-else@shop.example", secret), "421 4.7.0")
	if _, err := c.c.ReadLine(); err == nil {
		t.Fatal("the connection stays open after three failures")
	}

	// A good session: the envelope and the From must be at the domain.
	c = dialSubmission(t, addr)
	c.expect("EHLO client.example", "250")
	c.startTLS(roots)
	c.expect("AUTH PLAIN "+plain(user, secret), "235")
	c.expect("MAIL FROM:<billing@other.example>", "550 5.7.1")
	c.expect("MAIL FROM:<billing@shop.example>", "250")
	for i := range 50 {
		c.expect(fmt.Sprintf("RCPT TO:<r%d@rcpt.example>", i), "250")
	}
	c.expect("RCPT TO:<r50@rcpt.example>", "452 4.5.3")
	c.expect("RSET", "250")
	data := func(msg, want string) {
		t.Helper()
		c.expect("MAIL FROM:<billing@shop.example>", "250")
		c.expect("RCPT TO:<ada@rcpt.example>", "250")
		c.expect("DATA", "354")
		if _, err := c.c.W.WriteString(msg + "\r\n.\r\n"); err != nil {
			t.Fatal(err)
		}
		_ = c.c.W.Flush()
		c.expect("", want)
	}
	data("From: someone@other.example\r\nSubject: x\r\n\r\nx", "550 5.7.1")
	data("From: billing@shop.example\r\nSubject: Grüße\r\n\r\nx", "550 5.6.7")
	data("From: billing@shop.example\r\nSubject: x\r\n\r\nsmuggled\n.\nMAIL FROM:<x@shop.example>", "550 5.6.0")
	data("Subject: no sender\r\n\r\nx", "550 5.6.0")
	// Revoked: the next MAIL FROM on the open session sees it.
	s.api().revokeCredential(keyID)
	c.expect("MAIL FROM:<billing@shop.example>", "535 5.7.8")

	// A client that stops in the middle of DATA leaves nothing behind.
	user2, secret2, _ := newKey("send")
	c = dialSubmission(t, addr)
	c.expect("EHLO client.example", "250")
	c.startTLS(roots)
	c.expect("AUTH PLAIN "+plain(user2, secret2), "235")
	c.expect("MAIL FROM:<billing@shop.example>", "250")
	c.expect("RCPT TO:<ada@rcpt.example>", "250")
	c.expect("DATA", "354")
	_, _ = c.c.W.WriteString("From: billing@shop.example\r\nSubject: half\r\n\r\nhalf a bo")
	_ = c.c.W.Flush()
	c.c.Close()
	time.Sleep(time.Second)
	if n := len(s.api().emails("").Emails); n != 0 {
		t.Fatalf("%d emails stored by refused or broken sessions", n)
	}
}
