package e2e

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/mailyard/mailyard/internal/dnspublish"
	"github.com/mailyard/mailyard/internal/testenv"
)

// waitActivityRetrying waits until the current run of workflowID has the
// activity pending after at least one failed attempt (Temporal retries it),
// and returns the last failure's message.
func (s *stack) waitActivityRetrying(workflowID, activityType string, timeout time.Duration) string {
	s.t.Helper()
	var failure string
	testenv.Eventually(s.t, timeout, activityType+" of "+workflowID+" retrying", func() bool {
		desc, err := s.temporalC.DescribeWorkflowExecution(context.Background(), workflowID, "")
		if err != nil {
			return false
		}
		for _, a := range desc.PendingActivities {
			if a.ActivityType.GetName() == activityType && a.Attempt >= 2 && a.LastFailure != nil {
				failure = a.LastFailure.GetMessage()
				return true
			}
		}
		return false
	})
	return failure
}

// askTCP asks the DNS server at addr for name's TXT records over TCP (a DKIM
// key does not fit a plain UDP answer).
func askTCP(t *testing.T, addr, name string) *dns.Msg {
	t.Helper()
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(name), dns.TypeTXT)
	c := &dns.Client{Net: "tcp", Timeout: 5 * time.Second}
	in, _, err := c.Exchange(m, addr)
	if err != nil {
		t.Fatalf("query %s at %s: %v", name, addr, err)
	}
	return in
}

// txtAt is the TXT record at name on the server at addr ("" when none).
func txtAt(t *testing.T, addr, name string) string {
	t.Helper()
	in := askTCP(t, addr, name)
	if in.Rcode != dns.RcodeSuccess || len(in.Answer) == 0 {
		return ""
	}
	txt, ok := in.Answer[0].(*dns.TXT)
	if !ok {
		t.Fatalf("%s: not a TXT answer: %v", name, in.Answer[0])
	}
	return dnspublish.TXTValue(txt.Txt)
}

// badReceiver is a webhook receiver on loopback (plain HTTP) that reads each
// request and then misbehaves: it writes prefix at once and then the rest of
// its answer one byte per second; with neither, it never answers. It keeps
// every body by delivery id.
type badReceiver struct {
	URL    string
	prefix string
	answer string
	mu     sync.Mutex
	bodies map[string][]string
}

// startBadReceiver serves until the test ends.
func startBadReceiver(t *testing.T, prefix, answer string) *badReceiver {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &badReceiver{URL: "http://" + ln.Addr().String() + "/hook", prefix: prefix, answer: answer, bodies: map[string][]string{}}
	done := make(chan struct{})
	var conns sync.WaitGroup
	t.Cleanup(func() { close(done); ln.Close(); conns.Wait() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Go(func() { r.serve(c, done) })
		}
	}()
	return r
}

func (r *badReceiver) serve(c net.Conn, done chan struct{}) {
	defer c.Close()
	go func() { <-done; c.Close() }()
	br := bufio.NewReader(c)
	for {
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		raw, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		id := req.Header.Get("X-Service-Delivery-Id")
		r.bodies[id] = append(r.bodies[id], string(raw))
		r.mu.Unlock()
		if _, err := io.WriteString(c, r.prefix); err != nil {
			return
		}
		if r.answer == "" {
			// Never answer; the client gives up and closes.
			_, _ = io.Copy(io.Discard, br)
			return
		}
		for i := range len(r.answer) {
			if _, err := c.Write([]byte{r.answer[i]}); err != nil {
				return // the client gave up
			}
			select {
			case <-done:
				return
			case <-time.After(time.Second):
			}
		}
	}
}

// seen returns how often each delivery id arrived, and fails the test if one
// arrived again with other bytes.
func (r *badReceiver) seen(t *testing.T) map[string]int {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	n := map[string]int{}
	for id, bodies := range r.bodies {
		for _, b := range bodies[1:] {
			if b != bodies[0] {
				t.Fatalf("delivery %s arrived again with other bytes", id)
			}
		}
		n[id] = len(bodies)
	}
	return n
}
