package smtpserver

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	netsmtp "net/smtp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/emersion/go-smtp"
)

func TestEHLOAdvertisesTheRules(t *testing.T) {
	_, addr := start(t, Config{MaxRecipients: 50}, newBackend())
	c := dial(t, addr)
	c.expect("220 mx.mailyard.test ")
	c.send("EHLO client.test\r\n")
	_, lines := c.reply()
	for _, want := range []string{"SIZE 10485760", "8BITMIME", "SMTPUTF8", "PIPELINING", "ENHANCEDSTATUSCODES", "CHUNKING", "LIMITS RCPTMAX=50"} {
		if !contains(lines, want) {
			t.Errorf("EHLO reply %q lacks %q", lines, want)
		}
	}
	for _, unwanted := range []string{"STARTTLS", "AUTH PLAIN", "BINARYMIME"} {
		if contains(lines, unwanted) {
			t.Errorf("EHLO reply %q offers %q", lines, unwanted)
		}
	}
}

func contains(lines []string, s string) bool {
	for _, l := range lines {
		if l == s {
			return true
		}
	}
	return false
}

func TestAllowInsecureAuthIsPassedThrough(t *testing.T) {
	for _, allow := range []bool{false, true} {
		b := newBackend()
		b.auth = true
		_, addr := start(t, Config{AllowInsecureAuth: allow}, b)
		c := dial(t, addr)
		c.expect("220 ")
		c.send("EHLO client.test\r\n")
		_, lines := c.reply()
		if got := contains(lines, "AUTH PLAIN"); got != allow {
			t.Errorf("AllowInsecureAuth %v: AUTH PLAIN offered in plain text: %v", allow, got)
		}
	}
}

func TestMaxRecipients(t *testing.T) {
	_, addr := start(t, Config{MaxRecipients: 2}, newBackend())
	c := dial(t, addr)
	c.expect("220 ")
	c.send("EHLO client.test\r\nMAIL FROM:<a@client.test>\r\n")
	c.expect("250 ")
	c.expect("250 ")
	for i := range 2 {
		c.send(fmt.Sprintf("RCPT TO:<r%d@mx.mailyard.test>\r\n", i))
		c.expect("250 ")
	}
	c.send("RCPT TO:<r3@mx.mailyard.test>\r\n")
	c.expect("452 4.5.3 ")
}

func TestCleanMessagePassesByteForByte(t *testing.T) {
	b := newBackend()
	_, addr := start(t, Config{}, b)
	msg := "From: a@client.test\r\nSubject: clean \xc3\xa9\r\n\r\nLine one.\r\n.A line with a leading dot.\r\n\r\n..two dots\r\nlast\r\n"

	// Go's own client, which dot-stuffs.
	cl, err := netsmtp.Dial(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := cl.Mail("a@client.test"); err != nil {
		t.Fatal(err)
	}
	if err := cl.Rcpt("b@mx.mailyard.test"); err != nil {
		t.Fatal(err)
	}
	w, err := cl.Data()
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(w, msg)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := cl.Quit(); err != nil {
		t.Fatal(err)
	}
	got := b.delivered()
	if len(got) != 1 || string(got[0]) != msg {
		t.Fatalf("delivered %q, want %q", got, msg)
	}
}

func TestBareLineEndingsAreRefused(t *testing.T) {
	// Each payload is followed by a clean "\r\n.\r\n"; go-smtp's DATA ends
	// only there, so each is one message, and it holds a bare <CR> or <LF>.
	// The smuggled second message must never appear.
	const smuggled = "MAIL FROM:<evil@client.test>\r\nRCPT TO:<victim@mx.mailyard.test>\r\nDATA\r\nSubject: smuggled\r\n\r\nsmuggled"
	payloads := map[string]string{
		"bare LF":          "Subject: x\r\n\r\nline\nnext line",
		"bare CR":          "Subject: x\r\n\r\nline\rnext line",
		"LF.LF":            "Subject: x\r\n\r\nhello\n.\n" + smuggled,
		"LF.CRLF":          "Subject: x\r\n\r\nhello\n.\r\n" + smuggled,
		"CRLF.LF":          "Subject: x\r\n\r\nhello\r\n.\n" + smuggled,
		"CR.CR":            "Subject: x\r\n\r\nhello\r.\r" + smuggled,
		"CR.CRLF":          "Subject: x\r\n\r\nhello\r.\r\n" + smuggled,
		"LF at the start":  "\nSubject: x\r\n\r\nhello",
		"CR before CRLF":   "Subject: x\r\n\r\nhello\r\r\n",
		"LF before CRLF":   "Subject: x\r\n\r\nhello\n\r\n",
		"LFLF in the body": "Subject: x\r\n\r\nhello\n\n",
	}
	for name, payload := range payloads {
		t.Run(name, func(t *testing.T) {
			b := newBackend()
			_, addr := start(t, Config{}, b)
			c := dial(t, addr)
			c.transaction()
			// Pipelined like a smuggling client would: everything at once.
			c.send(payload + "\r\n.\r\nQUIT\r\n")
			c.expect("550 5.6.0 ")
			c.expect("221 ") // the very next reply: nothing was smuggled
			if got := b.delivered(); len(got) != 0 {
				t.Fatalf("delivered %q", got)
			}
			if err := <-b.dataErrs; err != ErrBareLineEnding {
				t.Fatalf("Data saw %v", err)
			}
		})
	}
}

// TestDotCRIsDroppedByGoSMTP documents the one bare <CR> that ReadMessage
// cannot see: go-smtp v0.25.1's dot-unstuffing drops a line-initial ".<CR>"
// that no <LF> follows and keeps the byte after it. The message does not
// end there and is stored without the bare <CR> (so with no 550): altered,
// but holding nothing a relay could split.
func TestDotCRIsDroppedByGoSMTP(t *testing.T) {
	b := newBackend()
	_, addr := start(t, Config{}, b)
	c := dial(t, addr)
	c.transaction()
	c.send("Subject: x\r\n\r\nhello\r\n.\rMAIL FROM:<evil@client.test>\r\n.\r\nQUIT\r\n")
	c.expect("250 ")
	c.expect("221 ")
	got := b.delivered()
	if want := "Subject: x\r\n\r\nhello\r\nMAIL FROM:<evil@client.test>\r\n"; len(got) != 1 || string(got[0]) != want {
		t.Fatalf("delivered %q, want only %q", got, want)
	}
}

// TestDotCRCRHidesTheEndOfData documents the worse case of the same go-smtp
// v0.25.1 state: after a line-initial ".<CR><CR><LF>" it keeps "<CR><LF>"
// but no longer knows that a line starts, so the "." line that follows does
// not end DATA: the client's next command (here QUIT) becomes content, and
// the message ends only at a later <CRLF>.<CRLF>. Nothing bare is stored:
// the lone "." line is what "..<CRLF>" stores too, and any relay stuffs it
// again. If go-smtp changes this, this test fails: update docs/smtp.md.
func TestDotCRCRHidesTheEndOfData(t *testing.T) {
	b := newBackend()
	_, addr := start(t, Config{}, b)
	c := dial(t, addr)
	c.transaction()
	c.send("Subject: x\r\n\r\nhello\r\n.\r\r\n.\r\nQUIT\r\n")
	c.send("\r\n.\r\n")
	c.expect("250 ") // the first reply: the QUIT got none
	c.send("QUIT\r\n")
	c.expect("221 ")
	got := b.delivered()
	if want := "Subject: x\r\n\r\nhello\r\n\r\n.\r\nQUIT\r\n\r\n"; len(got) != 1 || string(got[0]) != want {
		t.Fatalf("delivered %q, want %q", got, want)
	}
}

func TestBDATGetsTheSameCheck(t *testing.T) {
	b := newBackend()
	_, addr := start(t, Config{}, b)
	c := dial(t, addr)
	c.transaction()
	c.send(".\r\n") // end the DATA opened by transaction() with an empty message
	c.expect("250 ")

	bad := "Subject: x\r\n\r\nhello\n.\n"
	c.send("MAIL FROM:<a@client.test>\r\nRCPT TO:<b@mx.mailyard.test>\r\n")
	c.expect("250 ")
	c.expect("250 ")
	c.send(fmt.Sprintf("BDAT %d\r\n%s", len(bad), bad))
	c.expect("250 ")
	c.send("BDAT 2 LAST\r\n\r\n")
	c.expect("550 5.6.0 ")

	good := "Subject: x\r\n\r\nhello\r\n"
	c.send("MAIL FROM:<a@client.test>\r\nRCPT TO:<b@mx.mailyard.test>\r\n")
	c.expect("250 ")
	c.expect("250 ")
	c.send(fmt.Sprintf("BDAT %d LAST\r\n%s", len(good), good))
	c.expect("250 ")

	got := b.delivered()
	if len(got) != 2 || len(got[0]) != 0 || string(got[1]) != good {
		t.Fatalf("delivered %q", got)
	}
}

// sendData sends msg in one DATA transaction and returns the reply.
func sendData(t *testing.T, addr string, msg []byte) string {
	t.Helper()
	c := dial(t, addr)
	c.transaction()
	c.send(string(msg) + ".\r\n")
	last, _ := c.reply()
	return last
}

// sendBDAT sends msg as one BDAT LAST chunk and returns the reply.
func sendBDAT(t *testing.T, addr string, msg []byte) string {
	t.Helper()
	c := dial(t, addr)
	c.expect("220 ")
	c.send("EHLO client.test\r\nMAIL FROM:<a@client.test>\r\nRCPT TO:<b@mx.mailyard.test>\r\n")
	for range 3 {
		c.expect("250 ")
	}
	c.send(fmt.Sprintf("BDAT %d LAST\r\n%s", len(msg), msg))
	last, _ := c.reply()
	return last
}

func TestMessageSize(t *testing.T) {
	const limit = 4096
	b := newBackend()
	_, addr := start(t, Config{MaxMessageBytes: limit}, b)

	if got := sendData(t, addr, message(limit+1)); !strings.HasPrefix(got, "552 5.3.4 ") {
		t.Errorf("DATA of limit+1 bytes: %q", got)
	}
	if got := sendBDAT(t, addr, message(limit+1)); !strings.HasPrefix(got, "552 5.3.4 ") {
		t.Errorf("BDAT of limit+1 bytes: %q", got)
	}
	if got := sendBDAT(t, addr, message(limit)); !strings.HasPrefix(got, "250 ") {
		t.Errorf("BDAT of limit bytes: %q", got)
	}
	// go-smtp v0.25.1's DATA reader stops when the limit is used up before
	// it has read the ".<CRLF>" end marker, so DATA takes one byte less.
	if got := sendData(t, addr, message(limit-1)); !strings.HasPrefix(got, "250 ") {
		t.Errorf("DATA of limit-1 bytes: %q", got)
	}
	if got := sendData(t, addr, message(limit)); !strings.HasPrefix(got, "552 5.3.4 ") {
		t.Logf("DATA of exactly limit bytes now passes (%q): go-smtp fixed its off-by-one, update the docs", got)
	}
	c := dial(t, addr)
	c.expect("220 ")
	c.send(fmt.Sprintf("EHLO client.test\r\nMAIL FROM:<a@client.test> SIZE=%d\r\n", limit+1))
	c.expect("250 ")
	c.expect("552 5.3.4 ")

	got := b.delivered()
	if len(got) != 2 || len(got[0]) != limit || len(got[1]) != limit-1 {
		t.Fatalf("delivered %d messages", len(got))
	}
}

func TestMessageSizeDefault(t *testing.T) {
	if testing.Short() {
		t.Skip("sends 30 MiB")
	}
	b := newBackend()
	_, addr := start(t, Config{}, b)
	if got := sendData(t, addr, message(10<<20+1)); !strings.HasPrefix(got, "552 5.3.4 ") {
		t.Errorf("DATA of 10 MiB + 1: %q", got)
	}
	if got := sendBDAT(t, addr, message(10<<20)); !strings.HasPrefix(got, "250 ") {
		t.Errorf("BDAT of 10 MiB: %q", got)
	}
	if got := sendData(t, addr, message(10<<20-1)); !strings.HasPrefix(got, "250 ") {
		t.Errorf("DATA of 10 MiB - 1: %q", got)
	}
	if got := b.delivered(); len(got) != 2 {
		t.Fatalf("delivered %d messages", len(got))
	}
}

func TestUnavailable(t *testing.T) {
	b := newBackend()
	b.store = func() error { return ErrUnavailable }
	_, addr := start(t, Config{}, b)
	if got := sendData(t, addr, message(200)); !strings.HasPrefix(got, "451 4.3.0 ") {
		t.Fatalf("reply %q", got)
	}
}

func TestDisconnectMidDataCommitsNothing(t *testing.T) {
	b := newBackend()
	_, addr := start(t, Config{}, b)
	c := dial(t, addr)
	c.transaction()
	c.send("Subject: cut\r\n\r\nhalf a mess")
	c.conn.Close()
	select {
	case err := <-b.dataErrs:
		if !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Fatalf("ReadMessage returned %v, want unexpected EOF", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Data got no error")
	}
	if got := b.delivered(); len(got) != 0 {
		t.Fatalf("delivered %q", got)
	}
}

func TestIdleTimeout(t *testing.T) {
	_, addr := start(t, Config{IdleTimeout: time.Second}, newBackend())
	c := dial(t, addr)
	c.expect("220 ")
	began := time.Now()
	c.expect("421 4.4.2 ")
	c.closed(3 * time.Second)
	if d := time.Since(began); d < 900*time.Millisecond {
		t.Fatalf("closed after %v", d)
	}

	// Mid-DATA too: a stalled message is cut, a moving one is not.
	c = dial(t, addr)
	c.transaction()
	for range 4 { // 2 s in all, each gap under the timeout
		c.send("still coming\r\n")
		time.Sleep(500 * time.Millisecond)
	}
	c.send(".\r\n")
	c.expect("250 ")
	c.send("MAIL FROM:<a@client.test>\r\nRCPT TO:<b@mx.mailyard.test>\r\nDATA\r\nSubject: stalled\r\n")
	c.expect("250 ")
	c.expect("250 ")
	c.expect("354 ")
	c.closed(3 * time.Second)
}

func TestConnectionLimitSmall(t *testing.T) {
	b := newBackend()
	_, addr := start(t, Config{MaxConnections: 2}, b)
	held := []*client{dial(t, addr), dial(t, addr)}
	for _, c := range held {
		c.expect("220 ")
	}
	// Refused clients that never read do not hold up the accept loop.
	for range 10 {
		dial(t, addr)
	}
	c := dial(t, addr)
	c.expect("421 4.7.0 mx.mailyard.test Too many connections, try again later")
	c.closed(2 * time.Second)

	// The held ones still work, and a closed one frees its slot.
	held[0].send("NOOP\r\n")
	held[0].expect("250 ")
	held[1].send("QUIT\r\n")
	held[1].expect("221 ")
	eventually(t, func() bool {
		c := dial(t, addr)
		last, _ := c.reply()
		return strings.HasPrefix(last, "220 ")
	})
}

// eventually retries f for a few seconds: a slot comes back when the server
// has seen the close, a moment after the client.
func eventually(t *testing.T, f func() bool) {
	t.Helper()
	for range 100 {
		if f() {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatal("condition not met in 5 s")
}

func TestConnectionLimit600(t *testing.T) {
	if testing.Short() {
		t.Skip("opens 600 connections")
	}
	_, addr := start(t, Config{}, newBackend())
	const n = 600
	clients := make([]*client, n)
	replies := make([]string, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			conn, err := net.DialTimeout("tcp", addr, 10*time.Second)
			if err != nil {
				replies[i] = err.Error()
				return
			}
			c := &client{t: t, conn: conn, r: bufio.NewReader(conn)}
			clients[i] = c
			conn.SetReadDeadline(time.Now().Add(20 * time.Second))
			line, err := c.r.ReadString('\n')
			if err != nil {
				replies[i] = err.Error()
				return
			}
			replies[i] = line
			if strings.HasPrefix(line, "421 ") {
				// closed by the server right after the 421
				if rest, err := io.ReadAll(c.r); err != nil || len(rest) != 0 {
					replies[i] = fmt.Sprintf("after 421: %q, %v", rest, err)
				}
			}
		})
	}
	wg.Wait()
	defer func() {
		for _, c := range clients {
			if c != nil {
				c.conn.Close()
			}
		}
	}()
	var served, refused int
	var served1 *client
	for i, r := range replies {
		switch {
		case strings.HasPrefix(r, "220 mx.mailyard.test "):
			served++
			served1 = clients[i]
		case r == "421 4.7.0 mx.mailyard.test Too many connections, try again later\r\n":
			refused++
		default:
			t.Errorf("connection %d: %q", i, r)
		}
	}
	if served != DefaultMaxConnections || refused != n-DefaultMaxConnections {
		t.Fatalf("%d served, %d refused", served, refused)
	}
	served1.send("EHLO client.test\r\n")
	served1.expect("250 ")

	// Once the served ones go away, new connections are served again.
	for _, c := range clients {
		c.conn.Close()
	}
	eventually(t, func() bool {
		c := dial(t, addr)
		last, _ := c.reply()
		return strings.HasPrefix(last, "220 ")
	})
}

func TestNewRefusesBadConfig(t *testing.T) {
	for name, cfg := range map[string]Config{
		"no hostname":     {},
		"cert only":       {Hostname: "h", TLSCertFile: "c.pem"},
		"negative":        {Hostname: "h", MaxConnections: -1},
		"missing cert":    {Hostname: "h", TLSCertFile: "/nonexistent/c.pem", TLSKeyFile: "/nonexistent/k.pem"},
		"negative idle":   {Hostname: "h", IdleTimeout: -time.Second},
		"negative length": {Hostname: "h", MaxMessageBytes: -1},
		"negative per IP": {Hostname: "h", MaxConnectionsPerIP: -1},
		"negative time":   {Hostname: "h", MaxSessionTime: -time.Second},
	} {
		if _, err := New(cfg, newBackend()); err == nil {
			t.Errorf("%s: New accepted %+v", name, cfg)
		}
	}
}

func TestReadMessage(t *testing.T) {
	msg, err := ReadMessage(strings.NewReader("a\r\nb\r\n"))
	if err != nil || string(msg) != "a\r\nb\r\n" {
		t.Fatalf("%q, %v", msg, err)
	}
	r := &countingReader{r: strings.NewReader("a\nb\r\n" + strings.Repeat("x", 100000))}
	if _, err := ReadMessage(r); err != ErrBareLineEnding {
		t.Fatalf("bare LF: %v", err)
	}
	if r.eof != true {
		t.Fatal("ReadMessage did not read to the end after a bare LF")
	}
	if _, err := ReadMessage(strings.NewReader("a\r\nb\r")); err != ErrBareLineEnding {
		t.Fatalf("trailing CR: %v", err)
	}
	tooLarge := io.MultiReader(strings.NewReader("a\r\n"), errReader{ErrUnavailable})
	if _, err := ReadMessage(tooLarge); err != ErrUnavailable {
		t.Fatalf("error passed through: %v", err)
	}
}

type countingReader struct {
	r   io.Reader
	eof bool
}

func (c *countingReader) Read(b []byte) (int, error) {
	n, err := c.r.Read(b)
	if err == io.EOF {
		c.eof = true
	}
	return n, err
}

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

func FuzzReadMessage(f *testing.F) {
	for _, s := range []string{"", "a\r\n", "a\n", "a\r", "\r\n.\r\n", "\n.\n", "\n.\r\n", "\r.\r", "\r\r\n", "a\r\n\nb"} {
		f.Add([]byte(s), uint8(1))
		f.Add([]byte(s), uint8(7))
	}
	f.Fuzz(func(t *testing.T, data []byte, chunk uint8) {
		want := bytes.ContainsAny(bytes.ReplaceAll(data, []byte("\r\n"), nil), "\r\n")
		msg, err := ReadMessage(&chunkReader{data: data, n: int(chunk%16) + 1})
		switch {
		case want && err != ErrBareLineEnding:
			t.Fatalf("%q: got %q, %v; want ErrBareLineEnding", data, msg, err)
		case !want && (err != nil || !bytes.Equal(msg, data)):
			t.Fatalf("%q: got %q, %v; want it back", data, msg, err)
		}
	})
}

// chunkReader hands out data n bytes at a time, so that a CR and its LF can
// fall into different reads.
type chunkReader struct {
	data []byte
	n    int
}

func (c *chunkReader) Read(b []byte) (int, error) {
	if len(c.data) == 0 {
		return 0, io.EOF
	}
	n := copy(b[:min(len(b), c.n)], c.data)
	c.data = c.data[n:]
	return n, nil
}

// TestLineLength shows that go-smtp's line limit (maxLineLength, counted
// with the <CRLF>) holds inside DATA too, and what a client then sees.
func TestLineLength(t *testing.T) {
	b := newBackend()
	_, addr := start(t, Config{}, b)
	if got := sendData(t, addr, []byte("Subject: long\r\n\r\n"+strings.Repeat("x", maxLineLength-2)+"\r\n")); !strings.HasPrefix(got, "250 ") {
		t.Fatalf("line of %d bytes: %q", maxLineLength, got)
	}
	c := dial(t, addr)
	c.transaction()
	c.send("Subject: long\r\n\r\n" + strings.Repeat("x", maxLineLength-1) + "\r\n.\r\n")
	c.expect("554 5.0.0 ")
	c.expect("500 5.4.0 ")
	c.closed(2 * time.Second)
	if err := <-b.dataErrs; !errors.Is(err, smtp.ErrTooLongLine) {
		t.Fatalf("Data saw %v", err)
	}
	if got := b.delivered(); len(got) != 1 {
		t.Fatalf("delivered %d messages", len(got))
	}
}
