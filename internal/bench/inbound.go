package main

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/smtp"
	"slices"
	"strings"
	"sync"
	"time"

	gosmtp "github.com/emersion/go-smtp"
	"github.com/google/uuid"
	"go.temporal.io/sdk/client"
	sdkworker "go.temporal.io/sdk/worker"

	"github.com/mailyard/mailyard/activities"
	"github.com/mailyard/mailyard/internal/bouncetag"
	"github.com/mailyard/mailyard/internal/deliveryruns"
	"github.com/mailyard/mailyard/internal/inbound"
	"github.com/mailyard/mailyard/internal/keyauth"
	"github.com/mailyard/mailyard/internal/keys"
	"github.com/mailyard/mailyard/internal/secrets"
	"github.com/mailyard/mailyard/internal/store"
	"github.com/mailyard/mailyard/internal/temporalclient"
	"github.com/mailyard/mailyard/internal/temporaldev"
	"github.com/mailyard/mailyard/internal/webhook"
	"github.com/mailyard/mailyard/worker"
	"github.com/mailyard/mailyard/workflows/delivery"
	"github.com/mailyard/mailyard/workflows/email"
)

// The inbound benchmark's sizes keep it around a minute on a 2-core machine.
const (
	inboundReports      = 300 // reports per saturation run
	inboundConns        = 8   // SMTP connections sending at once
	inboundLatencyRate  = 20  // reports per second
	inboundLatencyTime  = 15 * time.Second
	inboundMailFrom     = "mail.bench.example"
	inboundBounceHost   = "bounces.bench.example"
	inboundRecipientFmt = "user%d@customer.example"
)

// benchInbound measures bounce reports end to end on a Temporal dev server
// and PostgreSQL: each report is a Postfix-style DSN sent over SMTP to the
// inbound listener (committed before its 250), handled by its workflow
// (the recipient bounced, suppressed, its event stored) and delivered as a
// bounced webhook. Throughput is reports per second from the first MAIL
// FROM to the last webhook, beside the same SMTP sends to a bare go-smtp
// sink that stores nothing; latency is from the 250 to the webhook at a
// steady rate.
func benchInbound(ctx context.Context, out io.Writer) error {
	began := time.Now()
	fmt.Fprintln(out, "\n== inbound bounces (SMTP → committed → workflow → effects → bounced webhook) ==")
	tsrv, err := temporaldev.Start(ctx, temporaldev.Options{Headless: true})
	if err != nil {
		return err
	}
	defer tsrv.Stop()
	st, done, err := benchStore(ctx)
	if err != nil {
		return err
	}
	defer done()

	rcv := &bounceArrivals{at: map[string]time.Time{}}
	rsrv := httptest.NewUnstartedServer(rcv)
	rsrv.Config.ErrorLog = log.New(io.Discard, "", 0)
	rsrv.StartTLS()
	defer rsrv.Close()
	pool := x509.NewCertPool()
	pool.AddCert(rsrv.Certificate())
	httpClient := webhook.NewClient(webhook.Policy{AllowPrivateNetworks: true}, webhook.WithRootCAs(pool))

	key := make([]byte, 32)
	box, _ := secrets.New(key)
	tags, _ := bouncetag.New(key)
	org, domainID, err := seedInbound(ctx, st, box, rsrv.URL+"/hook")
	if err != nil {
		return err
	}
	total := 2*inboundReports + inboundLatencyRate*int(inboundLatencyTime/time.Second) + 50
	senders, err := seedDeliveredEmails(ctx, st, tags, org, domainID, total)
	if err != nil {
		return err
	}

	tc, err := client.Dial(client.Options{HostPort: tsrv.Address, Logger: quietSDK{}, ConnectionOptions: temporalclient.Connection()})
	if err != nil {
		return err
	}
	defer tc.Close()
	discard := slog.New(slog.NewTextHandler(io.Discard, nil))
	runs := &deliveryruns.Runs{Temporal: tc, Store: st, Logger: discard}
	ew := sdkworker.New(tc, email.TaskQueue, worker.PollerOptions())
	worker.RegisterInbound(ew, &activities.Inbound{Store: st, Runs: runs, Tags: tags, Logger: discard})
	dw := sdkworker.New(tc, delivery.TaskQueue, worker.PollerOptions())
	worker.RegisterWebhooks(dw, &activities.Webhooks{Store: st, Box: box, Client: httpClient})
	for _, w := range []sdkworker.Worker{ew, dw} {
		if err := w.Start(); err != nil {
			return err
		}
		defer w.Stop()
	}

	srvCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	b := &inbound.Backend{Store: st, Temporal: tc, Tags: tags, BounceHost: inboundBounceHost, Retention: time.Hour, Logger: discard}
	ready := make(chan string, 1)
	served := make(chan error, 1)
	go func() {
		served <- b.Serve(srvCtx, inbound.Listener{Addr: "127.0.0.1:0"}, func(a string) { ready <- a })
	}()
	var addr string
	select {
	case addr = <-ready:
	case err := <-served:
		return err
	}
	sink, err := startBareSMTP()
	if err != nil {
		return err
	}
	defer sink.Close()

	next := 0
	take := func(n int) []string {
		s := senders[next : next+n]
		next += n
		return s
	}
	// Warm up.
	if _, err := runInboundSaturation(ctx, addr, rcv, take(50)); err != nil {
		return err
	}
	bare := measureBareSMTP(sink.Addr, take(inboundReports))
	fmt.Fprintf(out, "plain SMTP sends of the DSN to a sink that keeps nothing (%d connections):   %8.0f /s\n", inboundConns, bare)
	sat, err := runInboundSaturation(ctx, addr, rcv, take(inboundReports))
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "saturation, %d DSNs over %d connections, MAIL FROM → bounced webhook:   %6.1f reports/s\n",
		inboundReports, inboundConns, sat)

	lat, err := runInboundLatency(ctx, addr, rcv, take(inboundLatencyRate*int(inboundLatencyTime/time.Second)))
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "latency, %d reports/s for %s, 250 → bounced webhook:   p50 %4.0f ms   p90 %4.0f ms   p99 %4.0f ms\n",
		inboundLatencyRate, inboundLatencyTime, ms(percentile(lat, 50)), ms(percentile(lat, 90)), ms(percentile(lat, 99)))
	fmt.Fprintf(out, "inbound benchmark took %s\n", time.Since(began).Round(time.Second))
	return nil
}

// seedInbound makes an organization with a verified domain and a webhook
// for bounced events.
func seedInbound(ctx context.Context, st *store.Store, box *secrets.Box, url string) (int64, int64, error) {
	secret, _ := keys.NewAPIKey()
	org, err := st.CreateOrganizationWithKey(ctx, "bench", keyauth.WithSecret(secret, &store.APIKey{Label: "b", Username: "b", Permissions: store.Permissions{"admin"}}))
	if err != nil {
		return 0, 0, err
	}
	d := &store.Domain{OrganizationID: org.ID, Domain: emailDomain, MailFromSubdomain: inboundMailFrom, DKIMToken: "benchtoken", Status: store.DomainVerified}
	if err := st.CreateDomain(ctx, d, nil); err != nil {
		return 0, 0, err
	}
	err = st.CreateWebhook(ctx, &store.Webhook{OrganizationID: org.ID, URL: url, EventTypes: store.EventTypes{"bounced"}}, 20,
		func(id int64) ([]byte, error) { return box.Seal([]byte(benchSecret), store.WebhookSecretBinding(id)) })
	return org.ID, d.ID, err
}

// seedDeliveredEmails stores n one-recipient emails, delivered, as the email
// workflow leaves them, and returns their envelope senders in order.
func seedDeliveredEmails(ctx context.Context, st *store.Store, tags *bouncetag.Tagger, org, domainID int64, n int) ([]string, error) {
	senders := make([]string, n)
	for i := range n {
		id := uuid.Must(uuid.NewV7()).String()
		e := &store.Email{ID: id, OrganizationID: org, DomainID: domainID, FromAddress: "billing@" + emailDomain, Subject: "Your receipt", Content: []byte("{}")}
		if err := st.CreateEmail(ctx, e, []string{fmt.Sprintf(inboundRecipientFmt, i)}); err != nil {
			return nil, err
		}
		accepted, err := st.AcceptEmail(ctx, id, store.Acceptance{EnvelopeSender: tags.Sender(id, inboundMailFrom), Recipients: 1})
		if err != nil {
			return nil, err
		}
		if _, err := st.ChangeRecipient(ctx, id, store.RecipientChange{Position: 0, Status: store.RecipientDelivered}, nil); err != nil {
			return nil, err
		}
		senders[i] = accepted.EnvelopeSender
	}
	return senders, nil
}

// benchDSN is a Postfix-style hard bounce of the email sent with sender.
func benchDSN(sender string) []byte {
	id := strings.TrimPrefix(strings.SplitN(sender, ".", 2)[0], "bounces+")
	msg := `From: MAILER-DAEMON@mx.customer.example (Mail Delivery System)
To: ` + sender + `
Subject: Undelivered Mail Returned to Sender
Auto-Submitted: auto-replied
MIME-Version: 1.0
Message-Id: <` + uuid.NewString() + `@mx.customer.example>
Content-Type: multipart/report; report-type=delivery-status; boundary="b1"

--b1
Content-Type: text/plain; charset=us-ascii

Your message could not be delivered.

--b1
Content-Type: message/delivery-status

Reporting-MTA: dns; mx.customer.example

Final-Recipient: rfc822; someone@customer.example
Action: failed
Status: 5.1.1
Diagnostic-Code: smtp; 550 5.1.1 User unknown

--b1
Content-Type: text/rfc822-headers

Message-ID: <` + id + `@` + emailDomain + `>
Subject: Your receipt

--b1--
`
	return []byte(strings.ReplaceAll(msg, "\n", "\r\n"))
}

// bounceArrivals notes when the bounced webhook of each email first arrived.
type bounceArrivals struct {
	mu   sync.Mutex
	at   map[string]time.Time
	want map[string]bool
	done chan struct{}
}

func (a *bounceArrivals) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var ev struct {
		Data struct {
			MessageID string `json:"message_id"`
		} `json:"data"`
	}
	_ = json.NewDecoder(r.Body).Decode(&ev)
	now := time.Now()
	a.mu.Lock()
	if _, seen := a.at[ev.Data.MessageID]; !seen {
		a.at[ev.Data.MessageID] = now
		if a.want[ev.Data.MessageID] {
			delete(a.want, ev.Data.MessageID)
			if len(a.want) == 0 {
				close(a.done)
			}
		}
	}
	a.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

// expect waits for the emails of senders.
func (a *bounceArrivals) expect(senders []string) <-chan struct{} {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.want, a.done = map[string]bool{}, make(chan struct{})
	for _, s := range senders {
		a.want[emailOf(s)] = true
	}
	return a.done
}

func (a *bounceArrivals) arrival(sender string) time.Time {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.at[emailOf(sender)]
}

func emailOf(sender string) string {
	return strings.TrimPrefix(strings.SplitN(sender, ".", 2)[0], "bounces+")
}

// sendReports sends one DSN per sender over conns connections, each a
// session of several messages, and calls sent after each 250.
func sendReports(addr string, senders []string, conns int, sent func(sender string, at time.Time)) error {
	var wg sync.WaitGroup
	errs := make(chan error, conns)
	work := make(chan string)
	for range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := smtp.Dial(addr)
			if err != nil {
				errs <- err
				for range work {
				}
				return
			}
			defer c.Close()
			for s := range work {
				if err := sendOne(c, s); err != nil {
					errs <- err
					continue
				}
				if sent != nil {
					sent(s, time.Now())
				}
			}
			_ = c.Quit()
		}()
	}
	for _, s := range senders {
		work <- s
	}
	close(work)
	wg.Wait()
	close(errs)
	return <-errs
}

func sendOne(c *smtp.Client, sender string) error {
	if err := c.Mail(""); err != nil {
		return err
	}
	if err := c.Rcpt(sender); err != nil {
		return err
	}
	w, err := c.Data()
	if err != nil {
		return err
	}
	if _, err := w.Write(benchDSN(sender)); err != nil {
		return err
	}
	return w.Close()
}

func runInboundSaturation(ctx context.Context, addr string, rcv *bounceArrivals, senders []string) (float64, error) {
	done := rcv.expect(senders)
	start := time.Now()
	if err := sendReports(addr, senders, inboundConns, nil); err != nil {
		return 0, err
	}
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		return 0, fmt.Errorf("not every bounced webhook arrived within 2 minutes")
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	return float64(len(senders)) / time.Since(start).Seconds(), nil
}

// runInboundLatency sends at inboundLatencyRate, one connection per report
// as a reporting server would, and returns the sorted latencies from each
// 250 to its webhook.
func runInboundLatency(ctx context.Context, addr string, rcv *bounceArrivals, senders []string) ([]time.Duration, error) {
	done := rcv.expect(senders)
	var mu sync.Mutex
	answered := map[string]time.Time{}
	tick := time.NewTicker(time.Second / inboundLatencyRate)
	defer tick.Stop()
	var wg sync.WaitGroup
	var sendErr error
	for _, s := range senders {
		<-tick.C
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := sendReports(addr, []string{s}, 1, func(s string, at time.Time) {
				mu.Lock()
				answered[s] = at
				mu.Unlock()
			})
			if err != nil {
				mu.Lock()
				sendErr = err
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if sendErr != nil {
		return nil, sendErr
	}
	select {
	case <-done:
	case <-time.After(time.Minute):
		return nil, fmt.Errorf("not every bounced webhook arrived within a minute")
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	lat := make([]time.Duration, 0, len(senders))
	for _, s := range senders {
		lat = append(lat, rcv.arrival(s).Sub(answered[s]))
	}
	slices.Sort(lat)
	return lat, nil
}

// startBareSMTP is the baseline's server: go-smtp reading each message and
// keeping nothing.
func startBareSMTP() (*gosmtp.Server, error) {
	srv := gosmtp.NewServer(gosmtp.BackendFunc(func(*gosmtp.Conn) (gosmtp.Session, error) { return bareSession{}, nil }))
	srv.Domain = "bare.bench.example"
	srv.ErrorLog = log.New(io.Discard, "", 0)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	srv.Addr = l.Addr().String()
	go func() { _ = srv.Serve(l) }()
	return srv, nil
}

type bareSession struct{}

func (bareSession) Mail(string, *gosmtp.MailOptions) error { return nil }
func (bareSession) Rcpt(string, *gosmtp.RcptOptions) error { return nil }
func (bareSession) Data(r io.Reader) error                 { _, err := io.Copy(io.Discard, r); return err }
func (bareSession) Reset()                                 {}
func (bareSession) Logout() error                          { return nil }

func measureBareSMTP(addr string, senders []string) float64 {
	start := time.Now()
	if err := sendReports(addr, senders, inboundConns, nil); err != nil {
		return 0
	}
	return float64(len(senders)) / time.Since(start).Seconds()
}
