package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mailyard/mailyard/internal/freeport"
	"github.com/mailyard/mailyard/internal/temporaldev"
	"github.com/mailyard/mailyard/internal/testenv"
)

// The README's walk through `make run`, on the real `mailyard dev` process
// (SQLite, its own Temporal dev server, DNS and SMTP servers), on free ports:
// add a .test domain (it verifies itself), create a send key, send, find
// .data/mail/<email_id>.eml, receive the delivered webhook, then a bounce
// and a complaint that arrive later by mail at dev's bounce host. The message's
// DKIM signature is checked by an independent implementation, Debian's
// python3-dkim, against the key `mailyard dev` serves in DNS through the
// domain's CNAME.
func TestDevWalk(t *testing.T) {
	dev := startDev(t)
	dnsAddr, api, key := dev.dnsAddr, dev.api, dev.adminKey
	hooks := dev.hooks
	hookID := api.do(key, "POST", "/api/v1/webhooks", map[string]any{"url": hooks.url, "event_types": []string{"delivered", "bounced", "complained"}}, 201)["webhook"].(map[string]any)["id"]
	// A test event is started by the API, eagerly: dev's API and workers
	// share one Temporal client.
	api.do(key, "POST", fmt.Sprintf("/api/v1/webhooks/%v/test", hookID), nil, 201)
	testenv.Eventually(t, 30*time.Second, "the test event", func() bool {
		h := hooks.all()
		return len(h) == 1 && h[0]["data"].(map[string]any)["subject"] == "Mailyard test event"
	})
	domainID := api.do(key, "POST", "/api/v1/domains", map[string]any{"domain": "shop.test"}, 201)["domain"].(map[string]any)["id"]
	testenv.Eventually(t, 30*time.Second, "shop.test verified", func() bool {
		return api.do(key, "GET", "/api/v1/domains/1", nil, 200)["domain"].(map[string]any)["status"] == "verified"
	})
	sendKey := api.do(key, "POST", "/api/v1/credentials", map[string]any{"sending_domain_id": domainID, "label": "app", "permissions": []string{"send"}}, 201)["secret_key"].(string)
	id := api.do(sendKey, "POST", "/api/v1/emails", map[string]any{
		"from": "Shop <hello@shop.test>", "to": "ada@example.org", "subject": "Hello from Mailyard", "text": "It works.",
	}, 202)["email"].(map[string]any)["id"].(string)

	msg := dev.waitEML(t, id)
	testenv.Eventually(t, 30*time.Second, "the delivered webhook", func() bool {
		h := hooks.all()
		return len(h) == 2 && h[1]["data"].(map[string]any)["message_id"] == id
	})
	if !bytes.Contains(msg, []byte("Subject: Hello from Mailyard")) {
		t.Fatalf("the .eml is not the message:\n%s", msg)
	}
	verifyWithPythonDKIM(t, msg, dnsAddr)

	// The sink accepts bounce-later@ and complain@, then reports by mail
	// through the MX of mail.shop.test to dev's inbound listener: the email
	// is delivered twice, then bounced (async) and complained about.
	later := api.do(sendKey, "POST", "/api/v1/emails", map[string]any{
		"from": "hello@shop.test", "to": []string{"bounce-later@example.org", "complain@example.org"}, "subject": "Later", "text": "Later.",
	}, 202)["email"].(map[string]any)["id"].(string)
	byType := map[string]map[string]any{}
	testenv.Eventually(t, 60*time.Second, "delivered ×2, bounced and complained webhooks", func() bool {
		n := 0
		for _, h := range hooks.all() {
			if data := h["data"].(map[string]any); data["message_id"] == later {
				n++
				byType[h["event_type"].(string)+" "+data["to_email"].(string)] = data
			}
		}
		return n == 4
	})
	if b := byType["bounced bounce-later@example.org"]; b == nil || b["async"] != true || b["bounce_type"] != "hard" || b["enhanced_status"] != "5.1.1" {
		t.Fatalf("webhooks %v", byType)
	}
	if c := byType["complained complain@example.org"]; c == nil || c["feedback_type"] != "abuse" {
		t.Fatalf("webhooks %v", byType)
	}
	events := api.do(sendKey, "GET", "/api/v1/emails/"+later+"/events", nil, 200)["events"].([]any)
	if len(events) != 4 {
		t.Fatalf("the email's events: %v", events)
	}
}

// devProcess is a running `mailyard dev` in a directory of its own, on
// free ports, with its admin key and a webhook receiver.
type devProcess struct {
	dir                            string
	httpAddr, dnsAddr, inboundAddr string
	api                            *devClient
	adminKey                       string
	hooks                          *hookReceiver
}

// startDev starts `mailyard dev` (with the Temporal dev server of
// bin/temporal) in a temporary directory and waits for its API.
func startDev(t *testing.T) *devProcess {
	t.Helper()
	cli, err := temporaldev.FindBinary()
	if err != nil {
		t.Fatal(err)
	}
	if !filepath.IsAbs(cli) {
		if cli, err = filepath.Abs(cli); err != nil {
			t.Fatal(err)
		}
	}
	d := &devProcess{dir: t.TempDir(), httpAddr: testenv.FreeAddr(t), dnsAddr: testenv.FreeAddr(t), inboundAddr: testenv.FreeAddr(t)}
	// mailyard dev puts the Temporal UI at the dev server's port + 1000.
	temporalPort, err := freeport.WithCompanion("127.0.0.1", 1000)
	if err != nil {
		t.Fatal(err)
	}
	testenv.StartIn(t, d.dir, []string{
		"MAILYARD_TEMPORAL_CLI=" + cli,
		"TEMPORAL_ADDRESS=127.0.0.1:" + strconv.Itoa(temporalPort),
		"MAILYARD_HTTP_ADDR=" + d.httpAddr,
		"MAILYARD_INTERNAL_ADDR=" + testenv.FreeAddr(t),
		"MAILYARD_DNS_ADDR=" + d.dnsAddr,
		"MAILYARD_SMTP_RELAY=" + testenv.FreeAddr(t),
		"MAILYARD_INBOUND_ADDR=" + d.inboundAddr,
		"MAILYARD_SUBMISSION_ADDR=" + testenv.FreeAddr(t),
	}, "dev")
	testenv.WaitListening(t, d.httpAddr, 90*time.Second)
	admin, err := os.ReadFile(filepath.Join(d.dir, ".data", "admin-key"))
	if err != nil {
		t.Fatal(err)
	}
	d.adminKey = strings.TrimSpace(string(admin))
	d.api = &devClient{t: t, base: "http://" + d.httpAddr}
	d.hooks = newHookReceiver(t)
	return d
}

// waitEML waits for the dev SMTP sink's copy of the email,
// .data/mail/<email_id>.eml, and returns it.
func (d *devProcess) waitEML(t *testing.T, id string) []byte {
	t.Helper()
	eml := filepath.Join(d.dir, ".data", "mail", id+".eml")
	var msg []byte
	testenv.Eventually(t, 30*time.Second, eml, func() bool {
		var err error
		msg, err = os.ReadFile(eml)
		return err == nil
	})
	return msg
}

// hookReceiver keeps the webhook events it receives.
type hookReceiver struct {
	url string
	mu  sync.Mutex
	got []map[string]any
}

func newHookReceiver(t *testing.T) *hookReceiver {
	h := &hookReceiver{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var ev map[string]any
		if json.NewDecoder(r.Body).Decode(&ev) == nil {
			h.mu.Lock()
			h.got = append(h.got, ev)
			h.mu.Unlock()
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	h.url = srv.URL + "/hooks"
	return h
}

// all is a copy of the events received so far, in order.
func (h *hookReceiver) all() []map[string]any {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]map[string]any(nil), h.got...)
}

// verifyWithPythonDKIM checks a message's DKIM signature with Debian's
// python3-dkim, looking the key up over DNS at dnsAddr (TCP: a 2048-bit key
// does not fit a plain UDP answer). .ci/run installs the package.
func verifyWithPythonDKIM(t *testing.T, msg []byte, dnsAddr string) {
	t.Helper()
	if exec.Command("/usr/bin/python3", "-c", "import dkim, dns.resolver").Run() != nil {
		t.Skip("Debian's python3-dkim is not installed (apt-get install python3-dkim)")
	}
	host, port, _ := strings.Cut(dnsAddr, ":")
	const script = `
import sys, dkim, dns.resolver
r = dns.resolver.Resolver(configure=False)
r.nameservers, r.port = [sys.argv[1]], int(sys.argv[2])
def txt(name, timeout=5):
    name = name.decode() if isinstance(name, bytes) else name
    return b"".join(r.resolve(name, "TXT", tcp=True)[0].strings)
sys.exit(0 if dkim.verify(sys.stdin.buffer.read(), dnsfunc=txt) else 1)
`
	cmd := exec.Command("/usr/bin/python3", "-c", script, host, port)
	cmd.Stdin = bytes.NewReader(msg)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("python3-dkim does not verify the message: %v\n%s", err, out)
	}
}

// devClient calls the API of a `mailyard dev` process.
type devClient struct {
	t    *testing.T
	base string
}

func (c *devClient) do(key, method, path string, body any, want int) map[string]any {
	c.t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, c.base+path, rd)
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	if res.StatusCode != want {
		c.t.Fatalf("%s %s: %d, want %d: %s", method, path, res.StatusCode, want, raw)
	}
	var env struct {
		Data map[string]any `json:"data"`
	}
	if err := json.Unmarshal(raw, &env); err != nil {
		c.t.Fatal(err)
	}
	return env.Data
}
