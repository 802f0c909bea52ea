package tracking_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"image/gif"
	"io"
	"log/slog"
	"mime"
	"mime/multipart"
	"mime/quotedprintable"
	"net/http"
	"net/http/httptest"
	"net/mail"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/emersion/go-msgauth/dkim"
	"github.com/google/uuid"

	"github.com/mailyard/mailyard/internal/eventtype"
	"github.com/mailyard/mailyard/internal/keyauth"
	"github.com/mailyard/mailyard/internal/keys"
	"github.com/mailyard/mailyard/internal/mailmsg"
	"github.com/mailyard/mailyard/internal/store"
	"github.com/mailyard/mailyard/internal/testenv"
	"github.com/mailyard/mailyard/internal/tracking"
	"github.com/mailyard/mailyard/internal/tracktoken"
)

func TestMain(m *testing.M) { testenv.Main(m) }

var encKey = bytes.Repeat([]byte{7}, 32)

func links(t *testing.T) *tracking.Links {
	t.Helper()
	l, err := tracking.NewLinks(encKey, "bounces.mailyard.test")
	if err != nil {
		t.Fatal(err)
	}
	return l
}

const html = `<html><body><p>Hi {{unsubscribe_url}}</p>
<a href="https://shop.example/a?x=1&amp;y=2">A</a> <a href="mailto:help@shop.example">mail</a>
<a href="#top">top</a> <a href="javascript:alert(1)">js</a> <a data-mailyard-track="false" href="https://shop.example/keep">keep</a>
<a href="http://shop.example/b">B</a></body></html>`

// The copy of each recipient: links rewritten, exemptions kept, pixel and
// unsubscribe URL in place, List-Unsubscribe fields signed, and a DKIM
// signature go-msgauth verifies.
func TestPersonalizeSignsTheListHeaders(t *testing.T) {
	l := links(t)
	raw, err := mailmsg.Build(&mailmsg.Message{
		From: mail.Address{Address: "hello@shop.example"}, To: []mail.Address{{Address: "ada@x.example"}, {Address: "bob@x.example"}},
		Subject: "Hi", Text: "Unsubscribe: {{unsubscribe_url}}", HTML: html,
	}, "0192b7e4-0000-7000-8000-000000000001", "shop.example", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	id := uuid.New()
	settings := tracking.Settings{Opens: true, Clicks: true, Unsubscribe: true}
	p0, err := l.Personalize(raw, "https://t.mailyard.test", settings, id, 0)
	if err != nil {
		t.Fatal(err)
	}
	p1, _ := l.Personalize(raw, "https://t.mailyard.test", settings, id, 1)
	if want := []string{"https://shop.example/a?x=1&y=2", "http://shop.example/b"}; strings.Join(p0.Links, " ") != strings.Join(want, " ") || strings.Join(p1.Links, " ") != strings.Join(want, " ") {
		t.Fatalf("links %q and %q, want %q for both", p0.Links, p1.Links, want)
	}
	if bytes.Equal(p0.Message, p1.Message) {
		t.Fatal("two recipients got the same message")
	}

	key, _ := rsa.GenerateKey(rand.Reader, 2048)
	signed, err := mailmsg.Sign(p0.Message, "shop.example", "s1", key)
	if err != nil {
		t.Fatal(err)
	}
	der, _ := x509.MarshalPKIXPublicKey(&key.PublicKey)
	verifications, err := dkim.VerifyWithOptions(bytes.NewReader(signed), &dkim.VerifyOptions{LookupTXT: func(string) ([]string, error) {
		return []string{"v=DKIM1; k=rsa; p=" + base64.StdEncoding.EncodeToString(der)}, nil
	}})
	if err != nil || len(verifications) != 1 || verifications[0].Err != nil {
		t.Fatalf("DKIM: %v %+v", err, verifications)
	}
	signedFields := strings.ToLower(strings.Join(verifications[0].HeaderKeys, ":"))
	if !strings.Contains(signedFields, "list-unsubscribe:list-unsubscribe-post") {
		t.Fatalf("h= does not cover the list fields: %s", signedFields)
	}

	m, err := mail.ReadMessage(bytes.NewReader(signed))
	if err != nil {
		t.Fatal(err)
	}
	lu := m.Header.Get("List-Unsubscribe")
	if !strings.HasPrefix(lu, "<https://t.mailyard.test/t/u/") || !strings.Contains(lu, "<mailto:unsubscribe+") || !strings.HasSuffix(lu, "@bounces.mailyard.test>") {
		t.Fatalf("List-Unsubscribe: %q", lu)
	}
	if m.Header.Get("List-Unsubscribe-Post") != "List-Unsubscribe=One-Click" {
		t.Fatal("no List-Unsubscribe-Post")
	}
	// Over http (a tracking URL for development) there is no one-click,
	// which RFC 8058 allows for https only.
	plain, err := l.Personalize(raw, "http://t.mailyard.test", settings, id, 0)
	if err != nil {
		t.Fatal(err)
	}
	if pm, err := mail.ReadMessage(bytes.NewReader(plain.Message)); err != nil ||
		pm.Header.Get("List-Unsubscribe-Post") != "" || !strings.HasPrefix(pm.Header.Get("List-Unsubscribe"), "<http://t.mailyard.test/t/u/") {
		t.Fatalf("over http: %v %v", pm.Header, err)
	}
	unsubscribeURL := strings.TrimPrefix(strings.SplitN(lu, ">", 2)[0], "<")
	text, htmlPart := parts(t, m)
	if text != "Unsubscribe: "+unsubscribeURL {
		t.Errorf("text part: %q", text)
	}
	for _, want := range []string{
		`href="https://t.mailyard.test/t/c/`, `href="mailto:help@shop.example"`, `href="#top"`, `href="javascript:alert(1)"`,
		`href="https://shop.example/keep"`, `<img src="https://t.mailyard.test/t/o/`, `<p>Hi ` + unsubscribeURL + `</p>`,
	} {
		if !strings.Contains(htmlPart, want) {
			t.Errorf("the HTML lacks %s:\n%s", want, htmlPart)
		}
	}
	if strings.Contains(htmlPart, `href="https://shop.example/a`) || strings.Contains(htmlPart, `href="http://shop.example/b"`) {
		t.Errorf("a tracked link was left as it was:\n%s", htmlPart)
	}
}

// parts decodes the text and HTML of a multipart/alternative message.
func parts(t *testing.T, m *mail.Message) (text, html string) {
	t.Helper()
	_, params, err := mime.ParseMediaType(m.Header.Get("Content-Type"))
	if err != nil {
		t.Fatal(err)
	}
	r := multipart.NewReader(m.Body, params["boundary"])
	for {
		p, err := r.NextRawPart()
		if err == io.EOF {
			return text, html
		}
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(quotedprintable.NewReader(p))
		if strings.HasPrefix(p.Header.Get("Content-Type"), "text/html") {
			html = string(body)
		} else {
			text = string(body)
		}
	}
}

type routesFixture struct {
	st    *store.Store
	keys  *tracktoken.Keys
	email *store.Email
	org   int64
	srv   *httptest.Server
	http  *http.Client
	// later moves the routes' clock on.
	later atomic.Int64
}

func newRoutes(t *testing.T, url string) *routesFixture {
	t.Helper()
	ctx := context.Background()
	st := testenv.OpenStore(t, url)
	secret, _ := keys.NewAPIKey()
	org, err := st.CreateOrganizationWithKey(ctx, "acme", keyauth.WithSecret(secret, &store.APIKey{Label: "boot", Username: "acme", Permissions: store.Permissions{"admin"}}))
	if err != nil {
		t.Fatal(err)
	}
	d := &store.Domain{OrganizationID: org.ID, Domain: "shop.example", MailFromSubdomain: "mail.shop.example", DKIMToken: "tok", Status: store.DomainVerified}
	if err := st.CreateDomain(ctx, d, nil); err != nil {
		t.Fatal(err)
	}
	e := &store.Email{ID: uuid.NewString(), OrganizationID: org.ID, DomainID: d.ID, FromAddress: "hello@shop.example",
		Subject: "Sale", Source: store.SourceAPI, TrackOpens: true, TrackClicks: true, TrackUnsubscribe: true}
	if err := st.CreateEmail(ctx, e, []string{"ada@x.example", "bob@x.example"}); err != nil {
		t.Fatal(err)
	}
	if err := st.SaveEmailLinks(ctx, e.ID, []string{"https://shop.example/a?x=1&y=2", "javascript:alert(1)"}); err != nil {
		t.Fatal(err)
	}
	k, _ := tracktoken.New(encKey)
	logger := slog.New(slog.DiscardHandler)
	queue := tracking.NewQueue(100, logger)
	done := make(chan struct{})
	go func() { queue.Run(2); close(done) }()
	t.Cleanup(func() { queue.Close(); <-done })
	f := &routesFixture{st: st, keys: k, email: e, org: org.ID}
	mux := http.NewServeMux()
	(&tracking.Routes{Keys: k, Store: st, Queue: queue, Hosts: []string{"127.0.0.1"}, Logger: logger,
		Recorder: &tracking.Recorder{Store: st}, Now: func() time.Time { return time.Now().Add(time.Duration(f.later.Load())) }}).Register(mux)
	f.srv = httptest.NewServer(mux)
	t.Cleanup(f.srv.Close)
	f.http = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	return f
}

func (f *routesFixture) token(t *testing.T, kind tracktoken.Kind, recipient, link int) string {
	return f.keys.MustMint(tracktoken.Token{Kind: kind, EmailID: uuid.MustParse(f.email.ID), Recipient: recipient, Link: link})
}

func (f *routesFixture) do(t *testing.T, method, path, host, form string) (*http.Response, string) {
	t.Helper()
	var body io.Reader
	if form != "" {
		body = strings.NewReader(form)
	}
	req, _ := http.NewRequest(method, f.srv.URL+path, body)
	if host != "" {
		req.Host = host
	}
	if form != "" {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	req.Header.Set("User-Agent", "TestMail/1.0")
	res, err := f.http.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res, string(b)
}

func (f *routesFixture) events(t *testing.T) map[string]int {
	t.Helper()
	evs, _, err := f.st.EmailEvents(context.Background(), store.EmailScope{OrganizationID: f.org}, f.email.ID, store.Page{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, e := range evs {
		out[e.EventType+" "+e.ToEmail]++
	}
	return out
}

func (f *routesFixture) stats(t *testing.T) store.StatCounts {
	t.Helper()
	days, err := f.st.Stats(context.Background(), f.org, nil, time.Now(), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return days[0].StatCounts
}

func TestRoutes(t *testing.T) {
	testenv.Dialects(t, func(t *testing.T, url string) {
		f := newRoutes(t, url)
		ctx := context.Background()

		// The pixel, for any token; the opened event is recorded once per
		// recipient, and the opens of one recipient at most once a minute:
		// of three fetches in a row, one; a minute later, another.
		pixel := "/t/o/" + f.token(t, tracktoken.Open, 0, 0) + ".gif"
		for i, path := range []string{pixel, "/t/o/garbage.gif", pixel, pixel, "later", pixel} {
			if path == "later" {
				f.later.Store(int64(tracking.RepeatWindow))
				continue
			}
			res, body := f.do(t, "GET", path, "", "")
			if res.StatusCode != 200 || len(body) != 43 || res.Header.Get("Content-Type") != "image/gif" || res.Header.Get("Cache-Control") != "no-store" {
				t.Fatalf("%d %s: %d %q %v", i, path, res.StatusCode, res.Header.Get("Content-Type"), len(body))
			}
			if _, err := gif.Decode(strings.NewReader(body)); err != nil {
				t.Fatalf("not a GIF: %v", err)
			}
		}
		testenv.Eventually(t, 10*time.Second, "two opens recorded", func() bool {
			rs, _ := f.st.EmailRecipients(ctx, f.email.ID)
			return rs[0].Opens == 2
		})
		time.Sleep(200 * time.Millisecond) // a third would have been written by now
		if rs, _ := f.st.EmailRecipients(ctx, f.email.ID); rs[0].Opens != 2 {
			t.Fatalf("%d opens recorded, want 2", rs[0].Opens)
		}
		if ev := f.events(t); ev["opened ada@x.example"] != 1 || len(ev) != 1 {
			t.Fatalf("events after two opens: %v", ev)
		}

		// A click: 302 to the stored URL exactly, once an event per link.
		click := "/t/c/" + f.token(t, tracktoken.Click, 1, 0)
		for range 2 {
			res, _ := f.do(t, "GET", click, "", "")
			if res.StatusCode != http.StatusFound || res.Header.Get("Location") != "https://shop.example/a?x=1&y=2" {
				t.Fatalf("click: %d %q", res.StatusCode, res.Header.Get("Location"))
			}
		}
		testenv.Eventually(t, 10*time.Second, "the click recorded", func() bool { return f.events(t)["clicked bob@x.example"] == 1 })
		// A click of the same link within the window is not written
		// again (its event, removed here, stays away); after it, it is.
		if _, err := f.st.DB.NewDelete().Model((*store.Event)(nil)).Where("event_type = ?", "clicked").Exec(ctx); err != nil {
			t.Fatal(err)
		}
		if res, _ := f.do(t, "GET", click, "", ""); res.StatusCode != http.StatusFound {
			t.Fatalf("a repeated click: %d", res.StatusCode)
		}
		time.Sleep(200 * time.Millisecond) // it would have been written by now
		if n := f.events(t)["clicked bob@x.example"]; n != 0 {
			t.Fatal("a click within the window was written again")
		}
		f.later.Add(int64(tracking.RepeatWindow))
		f.do(t, "GET", click, "", "")
		testenv.Eventually(t, 10*time.Second, "the click after the window recorded", func() bool { return f.events(t)["clicked bob@x.example"] == 1 })

		// Forged, unknown, javascript: and foreign-host clicks: 404, no redirect.
		tok := f.token(t, tracktoken.Click, 1, 0)
		for _, path := range []string{
			"/t/c/" + tok[:10] + "a" + tok[11:], "/t/c/" + tok + "a", "/t/c/" + f.token(t, tracktoken.Open, 1, 0),
			"/t/c/" + f.token(t, tracktoken.Click, 1, 5), "/t/c/" + f.token(t, tracktoken.Click, 1, 1),
		} {
			if path == "/t/c/"+tok[:10]+"a"+tok[11:] && tok[10] == 'a' {
				continue
			}
			res, body := f.do(t, "GET", path, "", "")
			if res.StatusCode != 404 || res.Header.Get("Location") != "" || !strings.Contains(body, "<html") {
				t.Fatalf("%s: %d %q", path, res.StatusCode, res.Header.Get("Location"))
			}
		}
		if res, _ := f.do(t, "GET", click, "track.other.example", ""); res.StatusCode != 404 {
			t.Fatalf("a click on another organization's host: %d", res.StatusCode)
		}

		// The unsubscribe page changes nothing; the one-click POST does, once.
		unsub := "/t/u/" + f.token(t, tracktoken.Unsubscribe, 0, 0)
		res, body := f.do(t, "GET", unsub, "", "")
		if res.StatusCode != 200 || !strings.Contains(body, `<form method="post"`) || strings.Contains(body, "<script") {
			t.Fatalf("unsubscribe page: %d %s", res.StatusCode, body)
		}
		if among, _ := f.st.SuppressedAmong(ctx, f.org, []string{"ada@x.example"}, true); len(among) != 0 {
			t.Fatal("GET of the unsubscribe page unsubscribed")
		}
		if res, _ := f.do(t, "POST", unsub, "", "List-Unsubscribe=Yes"); res.StatusCode != 400 {
			t.Fatalf("a POST that is not one-click: %d", res.StatusCode)
		}
		for range 2 {
			if res, _ := f.do(t, "POST", unsub, "", "List-Unsubscribe=One-Click"); res.StatusCode != 200 {
				t.Fatalf("one-click POST: %d", res.StatusCode)
			}
		}
		if among, _ := f.st.SuppressedAmong(ctx, f.org, []string{"ada@x.example"}, true); !among["ada@x.example"] {
			t.Fatal("the one-click POST did not suppress the address")
		}
		if among, _ := f.st.SuppressedAmong(ctx, f.org, []string{"ada@x.example"}, false); len(among) != 0 {
			t.Fatal("an unsubscribe stops mail sent without unsubscribe")
		}
		ev := f.events(t)
		if ev["unsubscribed ada@x.example"] != 1 || ev[string(eventtype.Opened)+" ada@x.example"] != 1 || ev["clicked bob@x.example"] != 1 || len(ev) != 3 {
			t.Fatalf("events: %v", ev)
		}
		if s := f.stats(t); s.Opened != 1 || s.Clicked != 1 || s.Unsubscribed != 1 {
			t.Fatalf("stats: %+v", s)
		}
		// Taken off the list by the customer, the address stays off when
		// the old email's one-click POST comes again.
		if _, err := f.st.DeleteSuppression(ctx, f.org, "ada@x.example"); err != nil {
			t.Fatal(err)
		}
		if res, _ := f.do(t, "POST", unsub, "", "List-Unsubscribe=One-Click"); res.StatusCode != 200 {
			t.Fatalf("one-click POST again: %d", res.StatusCode)
		}
		if among, _ := f.st.SuppressedAmong(ctx, f.org, []string{"ada@x.example"}, true); len(among) != 0 {
			t.Fatal("a repeated one-click POST suppressed the address again")
		}
		// A forged unsubscribe token: 404, nothing changes.
		if res, _ := f.do(t, "POST", "/t/u/"+f.token(t, tracktoken.Open, 1, 0), "", "List-Unsubscribe=One-Click"); res.StatusCode != 404 {
			t.Fatalf("an open token on the unsubscribe route: %d", res.StatusCode)
		}
	})
}

// A click on a custom domain is served only for its own domain's emails.
func TestClickOnCustomDomain(t *testing.T) {
	f := newRoutes(t, testenv.SQLiteURL(t))
	ctx := context.Background()
	d, _ := f.st.DomainByID(ctx, f.email.DomainID)
	name := "track.shop.example"
	if err := f.st.SetDomainTracking(ctx, d, store.TrackingSettings{CustomDomainSet: true, CustomDomain: &name,
		CustomRecord: &store.DomainRecord{Purpose: "Tracking (CNAME)", Type: "CNAME", Name: name, Value: "t.mailyard.test"}}); err != nil {
		t.Fatal(err)
	}
	click := "/t/c/" + f.token(t, tracktoken.Click, 0, 0)
	if res, _ := f.do(t, "GET", click, name+":443", ""); res.StatusCode != http.StatusFound {
		t.Fatalf("a click on the email's own custom domain: %d", res.StatusCode)
	}
	if res, _ := f.do(t, "GET", click, "track.evil.example", ""); res.StatusCode != 404 {
		t.Fatalf("a click on another custom domain: %d", res.StatusCode)
	}
}
