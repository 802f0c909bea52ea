package main

import (
	"bytes"
	"context"
	"crypto"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/emersion/go-smtp"
	"github.com/google/uuid"
	"go.temporal.io/sdk/client"
	sdkworker "go.temporal.io/sdk/worker"

	"github.com/mailyard/mailyard/activities"
	"github.com/mailyard/mailyard/api"
	"github.com/mailyard/mailyard/internal/bouncetag"
	"github.com/mailyard/mailyard/internal/config"
	"github.com/mailyard/mailyard/internal/deliveryruns"
	"github.com/mailyard/mailyard/internal/keyauth"
	"github.com/mailyard/mailyard/internal/keys"
	"github.com/mailyard/mailyard/internal/mailmsg"
	"github.com/mailyard/mailyard/internal/secrets"
	"github.com/mailyard/mailyard/internal/smtpsend"
	"github.com/mailyard/mailyard/internal/store"
	"github.com/mailyard/mailyard/internal/temporalclient"
	"github.com/mailyard/mailyard/worker"
	"github.com/mailyard/mailyard/workflows/email"
)

// The email benchmark's sizes keep it under about two minutes on a 2-core
// machine, where the dev server sends a few dozen emails per second.
const (
	emailSaturation      = 300 // emails per saturation run
	emailRounds          = 2
	emailPlainSends      = 2000
	emailAlone           = 15 // emails sent one at a time
	emailLatencyRate     = 20 // emails per second
	emailLatencyDuration = 20 * time.Second
	emailCeilingQueue    = "bench-email-ceiling"
	emailDomain          = "bench.example"
	emailMailFrom        = "mail." + emailDomain
	emailSelector        = "benchtoken-1"
)

// benchEmailRequest is the email every benchmark send carries: a typical
// transactional message (text and HTML, one recipient), a few kilobytes once
// built and signed.
var benchEmailRequest = mailmsg.Request{
	From:    "Bench Shop <billing@" + emailDomain + ">",
	To:      []string{"someone@customer.example"},
	Subject: "Your receipt for order 4711",
	Text:    strings.Repeat("Thank you for your order. Your receipt is below.\n", 12),
	HTML:    "<html><body>" + strings.Repeat("<p>Thank you for your <b>order</b>. Your receipt is below.</p>\n", 24) + "</body></html>",
	Headers: map[string]string{"X-Order": "4711"},
}

// benchEmail measures sending end to end, in relay mode to a go-smtp server
// on loopback, on a Temporal dev server and again on the real Temporal
// server with PostgreSQL persistence: saturation (the API answering 32
// clients at once) beside the one-activity ceiling doing the same SMTP send
// of the same signed message and the floor of a run of the email workflow's
// shape that does nothing, with the CPU each spends per email; plain SMTP
// sends without Temporal; and the latency from the API's 202 to the
// server's 250, one email at a time and at 20 emails/s. SMTP submission is
// measured on the dev server.
func benchEmail(ctx context.Context, out io.Writer) error {
	began := time.Now()
	fmt.Fprintln(out, "\n== email sending (end to end: API → workflow → DKIM-signed SMTP; MAILYARD_SMTP_MODE=relay to a go-smtp server on loopback, no STARTTLS) ==")
	fmt.Fprintf(out, "load average at the start: %s\n", loadAverage())
	// SMTP submission is measured on the dev server only.
	dev, prod, err := onBothServers(ctx, out, func(t temporalTarget, first bool) (emailFigures, error) {
		return measureEmail(ctx, out, t, first)
	})
	if err != nil {
		return err
	}
	row := sideBySide(out, "email sending")
	row("plain SMTP sends of the signed message, no Temporal", "/s", dev.plain, prod.plain)
	ratio := func(a, b phaseFigures) float64 { return 100 * a.rate / b.rate }
	row("ceiling (1 workflow + 1 activity, same SMTP send)", "/s", dev.ceiling.rate, prod.ceiling.rate)
	row("floor (the email workflow's shape, 1 workflow task, its local step empty)", "/s", dev.floor.rate, prod.floor.rate)
	row("  floor / ceiling: the most a run per email can reach", "%", ratio(dev.floor, dev.ceiling), ratio(prod.floor, prod.ceiling))
	row(fmt.Sprintf("saturation, %d emails, %d concurrent POSTs: mailyard", emailSaturation, senders), "/s", dev.mailyard.rate, prod.mailyard.rate)
	row("  mailyard / ceiling (goal ≥ 130)", "%", ratio(dev.mailyard, dev.ceiling), ratio(prod.mailyard, prod.ceiling))
	row("  with eager start (API and worker in one process, as `mailyard dev`)", "/s", dev.eager.rate, prod.eager.rate)
	row("    mailyard with eager start / ceiling", "%", ratio(dev.eager, dev.ceiling), ratio(prod.eager, prod.ceiling))
	perEmail := func(path, self string, dev, prod phaseFigures) {
		row("  CPU per email: "+path, "ms", ms(dev.cpu.total()), ms(prod.cpu.total()))
		row("    of which this process ("+self+")", "ms", ms(dev.cpu.self), ms(prod.cpu.self))
		row("    of which the Temporal server", "ms", ms(dev.cpu.temporal), ms(prod.cpu.temporal))
		row("    of which PostgreSQL (the real server's persistence too)", "ms", ms(dev.cpu.postgres), ms(prod.cpu.postgres))
		row("    Temporal persistence requests per email", "", dev.server.persistence, prod.server.persistence)
		row("    workflow tasks from matching's stored backlog, per email", "", dev.server.backlog, prod.server.backlog)
	}
	perEmail("ceiling", "its worker", dev.ceiling, prod.ceiling)
	perEmail("floor", "its worker", dev.floor, prod.floor)
	perEmail("mailyard", "API and worker", dev.mailyard, prod.mailyard)
	perEmail("mailyard, eager start", "API and worker", dev.eager, prod.eager)
	row(fmt.Sprintf("one email at a time (%d), API 202 → SMTP 250, p50", emailAlone), "ms", ms(dev.aloneP50), ms(prod.aloneP50))
	row(fmt.Sprintf("%d emails/s for %s, API 202 → SMTP 250, p50 (goal < 100)", emailLatencyRate, emailLatencyDuration), "ms", ms(dev.p50), ms(prod.p50))
	row("  p90", "ms", ms(dev.p90), ms(prod.p90))
	row("  p99 (goal < 250)", "ms", ms(dev.p99), ms(prod.p99))
	row("  with eager start (API and worker in one process, as `mailyard dev`): p50", "ms", ms(dev.eagerP50), ms(prod.eagerP50))
	row("    p99", "ms", ms(dev.eagerP99), ms(prod.eagerP99))
	fmt.Fprintf(out, "load average at the end: %s\n", loadAverage())
	fmt.Fprintf(out, "email benchmark took %s\n", time.Since(began).Round(time.Second))
	return nil
}

// emailFigures are one Temporal server's email measurements.
type emailFigures struct {
	plain                           float64 // per second
	ceiling, floor, mailyard, eager phaseFigures
	aloneP50, p50, p90, p99         time.Duration
	eagerP50, eagerP99              time.Duration
}

// phaseFigures are one saturation phase's averages over the rounds: emails
// per second, and per email the CPU and the Temporal server's counters.
type phaseFigures struct {
	rate   float64
	cpu    cpuSample
	server serverCounters
}

// measureEmail measures on the Temporal server t, with a store on a
// throwaway PostgreSQL database; with submission, SMTP submission too.
func measureEmail(ctx context.Context, out io.Writer, t temporalTarget, submission bool) (emailFigures, error) {
	var fig emailFigures
	st, done, err := benchStore(ctx)
	if err != nil {
		return fig, err
	}
	defer done()

	rcv := &arrivals{}
	var unsigned atomic.Int64
	sink, err := startSink(rcv, &unsigned)
	if err != nil {
		return fig, err
	}
	defer sink.Close()

	key := make([]byte, 32)
	box, _ := secrets.New(key)
	tags, _ := bouncetag.New(key)
	env := map[string]string{
		// Benchmarks measure throughput, not the per-key rate limit.
		"MAILYARD_RATE_LIMIT": "off",
		"MAILYARD_SMTP_MODE":  smtpsend.ModeRelay,
		"MAILYARD_SMTP_RELAY": sink.Addr,
		"MAILYARD_SMTP_HELO":  "bench.mailyard.test",
	}
	cfg, err := config.LoadFrom(func(name string) string { return env[name] }, config.Need{})
	if err != nil {
		return fig, err
	}
	cfg.EncryptionKey = key
	sendKey, signer, err := seedSendingDomain(ctx, st, box)
	if err != nil {
		return fig, err
	}
	// The sender the worker builds from this configuration.
	sender, err := worker.NewSender(worker.Deps{Config: cfg})
	if err != nil {
		return fig, err
	}
	// The plain sends and the ceiling send one message, built and signed
	// as Prepare does; only the envelope sender changes, so the sink can
	// tell the sends apart.
	signed, err := signBenchMessage(signer)
	if err != nil {
		return fig, err
	}
	sendSigned := func(ctx context.Context, id string) error {
		res := sender.Send(ctx, tags.Sender(id, emailMailFrom), benchEmailRequest.To, signed)
		if res[0].Status != smtpsend.Delivered {
			return fmt.Errorf("SMTP send: %d %s", res[0].Code, res[0].Message)
		}
		return nil
	}

	tc, err := client.Dial(client.Options{HostPort: t.Address, Logger: quietSDK{}, ConnectionOptions: temporalclient.Connection()})
	if err != nil {
		return fig, err
	}
	defer tc.Close()
	discard := slog.New(slog.NewTextHandler(io.Discard, nil))
	// Both workers poll as the product's workers do.
	w := sdkworker.New(tc, email.TaskQueue, worker.PollerOptions())
	worker.RegisterEmails(w, &activities.Emails{Store: st, Box: box, Tags: tags, Sender: sender, Runs: &deliveryruns.Runs{Temporal: tc, Logger: discard}})
	ceiling := sdkworker.New(tc, emailCeilingQueue, worker.PollerOptions())
	registerCeiling(ceiling, sendSigned)
	floor := &arrivals{}
	registerFloor(ceiling, floor)
	for _, wk := range []sdkworker.Worker{w, ceiling} {
		if err := wk.Start(); err != nil {
			return fig, err
		}
		defer wk.Stop()
	}
	srvCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	poster, stop, err := startEmailAPI(srvCtx, api.Deps{Config: cfg, Store: st, Temporal: tc, Logger: discard}, sendKey)
	if err != nil {
		return fig, err
	}
	defer stop()
	// The same API with eager workflow start: this process's worker gets
	// each email's first workflow task in the answer to its start.
	eagerPoster, stopEager, err := startEmailAPI(srvCtx, api.Deps{Config: cfg, Store: st, Temporal: tc, Logger: discard, EagerStart: true}, sendKey)
	if err != nil {
		return fig, err
	}
	defer stopEager()

	if fig.plain, err = measurePlainSMTP(ctx, rcv, sendSigned); err != nil {
		return fig, err
	}

	// Warm up every path so connection set-up and caches are not measured.
	if _, err := runCeiling(ctx, tc, emailCeilingQueue, rcv, 20); err != nil {
		return fig, err
	}
	if _, err := runFloor(ctx, tc, emailCeilingQueue, floor, 20); err != nil {
		return fig, err
	}
	for _, p := range []*emailPoster{poster, eagerPoster} {
		if _, err := runEmails(ctx, p, rcv, 20); err != nil {
			return fig, err
		}
	}

	// Measured alternately and averaged, as the delivery benchmark does: the
	// throughput drifts between runs on a 2-core machine. Each phase starts
	// on quiet servers, and its CPU and the Temporal server's counters are
	// read once its last run has closed and the servers are quiet again, so
	// the work it leaves behind counts in its own figures.
	cpu := cpuSampler{temporalPid: t.Pid}
	waitIdle(ctx, tc, anyRunning)
	cpu.waitQuiet(ctx)
	phases := []struct {
		name    string
		fig     *phaseFigures
		running string // its runs, for waitIdle
		run     func() (float64, error)
	}{
		{"ceiling", &fig.ceiling, ceilingRunning, func() (float64, error) { return runCeiling(ctx, tc, emailCeilingQueue, rcv, emailSaturation) }},
		{"floor", &fig.floor, floorRunning, func() (float64, error) { return runFloor(ctx, tc, emailCeilingQueue, floor, emailSaturation) }},
		{"mailyard", &fig.mailyard, emailsRunning, func() (float64, error) { return runEmails(ctx, poster, rcv, emailSaturation) }},
		{"eager start", &fig.eager, emailsRunning, func() (float64, error) { return runEmails(ctx, eagerPoster, rcv, emailSaturation) }},
	}
	const measured = emailSaturation * emailRounds
	for round := range emailRounds {
		var quietFor time.Duration
		rates := make([]float64, len(phases))
		var lost []string // the phases whose hand-outs of tasks went wrong
		for i, p := range phases {
			cpuBefore := cpu.sample()
			serverBefore, err := readServerCounters(t.MetricsURL)
			if err != nil {
				return fig, err
			}
			rate, err := p.run()
			if err != nil {
				return fig, err
			}
			waitIdle(ctx, tc, p.running)
			quietFor += cpu.waitQuiet(ctx)
			cpuAfter := cpu.sample()
			serverAfter, err := readServerCounters(t.MetricsURL)
			if err != nil {
				return fig, err
			}
			rates[i] = rate
			counted := serverAfter.sub(serverBefore)
			if counted.failed > 0 || counted.timedOut > 0 {
				lost = append(lost, fmt.Sprintf("%s %.0f failed, %.0f timed out", p.name, counted.failed, counted.timedOut))
			}
			p.fig.rate += rate / emailRounds
			p.fig.cpu = p.fig.cpu.add(cpuAfter.sub(cpuBefore).per(measured))
			p.fig.server = p.fig.server.add(counted.per(measured))
		}
		fmt.Fprintf(out, "  round %d: mailyard %6.1f /s   with eager start %6.1f /s   ceiling %6.1f /s   floor %6.1f /s   (waits for quiet servers %.1f s)\n",
			round+1, rates[2], rates[3], rates[0], rates[1], quietFor.Seconds())
		// Such a phase's rate says how long the server took to recover
		// from a failed hand-out (serverCounters), not what the path can do.
		if len(lost) > 0 {
			fmt.Fprintf(out, "    hand-outs of tasks to workers: %s\n", strings.Join(lost, "; "))
		}
	}

	waitIdle(ctx, tc, emailsRunning)
	alone, err := emailAloneLatency(ctx, poster, rcv)
	if err != nil {
		return fig, err
	}
	fig.aloneP50 = percentile(alone, 50)
	lat, err := emailLatency(ctx, poster, rcv)
	if err != nil {
		return fig, err
	}
	fig.p50, fig.p90, fig.p99 = percentile(lat, 50), percentile(lat, 90), percentile(lat, 99)

	waitIdle(ctx, tc, emailsRunning)
	if lat, err = emailLatency(ctx, eagerPoster, rcv); err != nil {
		return fig, err
	}
	fig.eagerP50, fig.eagerP99 = percentile(lat, 50), percentile(lat, 99)

	if submission {
		if err := measureSubmission(ctx, out, st, tc, "bench@"+emailDomain, sendKey, rcv); err != nil {
			return fig, err
		}
	}
	if n := unsigned.Load(); n > 0 {
		return fig, fmt.Errorf("%d messages reached the SMTP server without a DKIM signature", n)
	}
	return fig, nil
}

// emailsRunning counts, for waitIdle, the email workflows not yet ended:
// a run ends once its email is settled.
const emailsRunning = "WorkflowType = '" + email.WorkflowName + "' AND ExecutionStatus = 'Running'"

// startEmailAPI serves an API made of d on a loopback listener until ctx
// ends or stop is called, and returns a poster of emails to it with sendKey.
func startEmailAPI(ctx context.Context, d api.Deps, sendKey string) (poster *emailPoster, stop func(), err error) {
	a := api.New(d)
	go a.Run(ctx)
	public := httptest.NewServer(a.Handler())
	if poster, err = newEmailPoster(public.URL+"/api/v1/emails", sendKey); err != nil {
		public.Close()
		return nil, nil, err
	}
	return poster, public.Close, nil
}

// seedSendingDomain makes an organization with a verified domain, its active
// DKIM key (as onboarding leaves it) and a send key scoped to the domain. It
// returns the send key and the DKIM private key.
func seedSendingDomain(ctx context.Context, st *store.Store, box *secrets.Box) (string, crypto.Signer, error) {
	admin, _ := keys.NewAPIKey()
	org, err := st.CreateOrganizationWithKey(ctx, "bench", keyauth.WithSecret(admin, &store.APIKey{Label: "admin", Username: "admin", Permissions: store.Permissions{"admin"}}))
	if err != nil {
		return "", nil, err
	}
	d := &store.Domain{OrganizationID: org.ID, Domain: emailDomain, MailFromSubdomain: emailMailFrom, DKIMToken: "benchtoken", Status: store.DomainVerified}
	if err := st.CreateDomain(ctx, d, nil); err != nil {
		return "", nil, err
	}
	pair, err := keys.NewDKIMKey()
	if err != nil {
		return "", nil, err
	}
	enc, err := box.Seal(pair.PrivatePKCS8, store.DKIMKeyBinding(emailSelector, 1))
	if err != nil {
		return "", nil, err
	}
	published := time.Now()
	if _, err := st.InsertDKIMKeyIfAbsent(ctx, &store.DKIMKey{
		Selector: emailSelector, DomainID: d.ID, Position: 1, Generation: 1, State: store.DKIMActive, Bits: keys.DKIMKeyBits,
		PrivateKeyEnc: enc, PublicKey: pair.PublicBase64, PublishedAt: &published,
	}); err != nil {
		return "", nil, err
	}
	parsed, err := x509.ParsePKCS8PrivateKey(pair.PrivatePKCS8)
	if err != nil {
		return "", nil, err
	}
	secret, _ := keys.NewAPIKey()
	err = st.CreateCredential(ctx, keyauth.WithSecret(secret, &store.APIKey{
		OrganizationID: org.ID, SendingDomainID: &d.ID, Label: "bench", Username: "bench@" + emailDomain,
		Permissions: store.Permissions{api.PermissionSend}}))
	return secret, parsed.(crypto.Signer), err
}

// signBenchMessage builds and signs benchEmailRequest as the Prepare activity
// does.
func signBenchMessage(signer crypto.Signer) ([]byte, error) {
	msg, problems := mailmsg.Validate(benchEmailRequest, emailDomain)
	if len(problems) > 0 {
		return nil, fmt.Errorf("bench email: %v", problems)
	}
	raw, err := mailmsg.Build(msg, uuid.NewString(), emailDomain, time.Now())
	if err != nil {
		return nil, err
	}
	return mailmsg.Sign(raw, emailDomain, emailSelector, signer)
}

// startSink starts the recipients' side: a go-smtp server on loopback that
// accepts every message and notes, by the id in its envelope sender, when
// the message was complete (just before the server answers 250).
func startSink(rcv *arrivals, unsigned *atomic.Int64) (*smtp.Server, error) {
	srv := smtp.NewServer(sinkBackend{rcv: rcv, unsigned: unsigned})
	srv.Domain = "sink.bench.example"
	srv.ReadTimeout, srv.WriteTimeout = time.Minute, time.Minute
	srv.MaxMessageBytes = 10 << 20
	srv.ErrorLog = log.New(io.Discard, "", 0)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	srv.Addr = l.Addr().String()
	go func() { _ = srv.Serve(l) }()
	return srv, nil
}

type sinkBackend struct {
	rcv *arrivals
	// unsigned counts messages without a DKIM signature, which would mean
	// the benchmark is not measuring what it says.
	unsigned *atomic.Int64
}

func (b sinkBackend) NewSession(*smtp.Conn) (smtp.Session, error) {
	return &sinkSession{sinkBackend: b}, nil
}

type sinkSession struct {
	sinkBackend
	id string
}

func (s *sinkSession) Mail(from string, _ *smtp.MailOptions) error {
	// The envelope sender of the email activities,
	// bounces+<email_id>.<position>.<tag>@<MAIL FROM subdomain>, names the email.
	local, _, _ := strings.Cut(from, "@")
	s.id, _, _ = strings.Cut(strings.TrimPrefix(local, "bounces+"), ".")
	return nil
}

func (s *sinkSession) Rcpt(string, *smtp.RcptOptions) error { return nil }

func (s *sinkSession) Data(r io.Reader) error {
	msg, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	if !bytes.HasPrefix(msg, []byte("DKIM-Signature:")) {
		s.unsigned.Add(1)
	}
	s.rcv.note(s.id, time.Now())
	return nil
}

func (s *sinkSession) Reset()        { s.id = "" }
func (s *sinkSession) Logout() error { return nil }

// emailPoster sends the benchmark email through the API with a send key,
// over kept-alive connections.
type emailPoster struct {
	url, key string
	body     []byte
	client   *http.Client
}

func newEmailPoster(url, key string) (*emailPoster, error) {
	r := benchEmailRequest
	body, err := json.Marshal(map[string]any{"from": r.From, "to": r.To, "subject": r.Subject, "text": r.Text, "html": r.HTML, "headers": r.Headers})
	return &emailPoster{url: url, key: key, body: body,
		client: &http.Client{Transport: &http.Transport{MaxIdleConns: senders * 2, MaxIdleConnsPerHost: senders * 2}}}, err
}

// send posts the email and returns its id once the API has answered 202.
func (p *emailPoster) send(ctx context.Context) (string, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, p.url, bytes.NewReader(p.body))
	req.Header.Set("Authorization", "Bearer "+p.key)
	req.Header.Set("Content-Type", "application/json")
	res, err := p.client.Do(req)
	if err != nil {
		return "", err
	}
	defer res.Body.Close()
	var env struct {
		Data struct {
			Email struct {
				ID string `json:"id"`
			} `json:"email"`
		} `json:"data"`
	}
	if err := json.NewDecoder(res.Body).Decode(&env); err != nil || res.StatusCode != http.StatusAccepted || env.Data.Email.ID == "" {
		return "", fmt.Errorf("send email answered %d (%v)", res.StatusCode, err)
	}
	return env.Data.Email.ID, nil
}

// measurePlainSMTP sends the signed message emailPlainSends times, senders
// at a time, with the worker's sender and no Temporal or database.
func measurePlainSMTP(ctx context.Context, rcv *arrivals, send func(context.Context, string) error) (float64, error) {
	rcv.expect(emailPlainSends)
	start := time.Now()
	if err := parallel(emailPlainSends, func(int) error { return send(ctx, uuid.NewString()) }); err != nil {
		return 0, err
	}
	elapsed := time.Since(start)
	if err := rcv.wait(ctx, time.Minute); err != nil {
		return 0, fmt.Errorf("plain SMTP: %w", err)
	}
	return float64(emailPlainSends) / elapsed.Seconds(), nil
}

// runEmails posts n emails, senders at a time, and returns how many per
// second reached the sink.
func runEmails(ctx context.Context, poster *emailPoster, rcv *arrivals, n int) (float64, error) {
	rcv.expect(n)
	start := time.Now()
	if err := parallel(n, func(int) error { _, err := poster.send(ctx); return err }); err != nil {
		return 0, err
	}
	if err := rcv.wait(ctx, 10*time.Minute); err != nil {
		return 0, fmt.Errorf("emails: %w", err)
	}
	return float64(n) / time.Since(start).Seconds(), nil
}

// emailLatency posts emailLatencyRate emails a second for
// emailLatencyDuration and returns, sorted, the time from each 202 to the
// sink's 250 for that email.
func emailLatency(ctx context.Context, poster *emailPoster, rcv *arrivals) ([]time.Duration, error) {
	n := emailLatencyRate * int(emailLatencyDuration/time.Second)
	rcv.expect(n)
	type accepted struct {
		id string
		at time.Time
	}
	results := make([]accepted, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	tick := time.NewTicker(time.Second / emailLatencyRate)
	defer tick.Stop()
	for i := range n {
		<-tick.C
		wg.Go(func() {
			id, err := poster.send(ctx)
			results[i], errs[i] = accepted{id: id, at: time.Now()}, err
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if err := rcv.wait(ctx, 5*time.Minute); err != nil {
		return nil, fmt.Errorf("latency: %w", err)
	}
	lat := make([]time.Duration, n)
	for i, r := range results {
		lat[i] = rcv.at(r.id).Sub(r.at)
	}
	slices.Sort(lat)
	return lat, nil
}

// emailAloneLatency sends emails one after another, each once the previous
// one's 250 has come: the path's own latency, without any queue.
func emailAloneLatency(ctx context.Context, poster *emailPoster, rcv *arrivals) ([]time.Duration, error) {
	lat := make([]time.Duration, emailAlone)
	for i := range lat {
		rcv.expect(1)
		id, err := poster.send(ctx)
		accepted := time.Now()
		if err != nil {
			return nil, err
		}
		if err := rcv.wait(ctx, time.Minute); err != nil {
			return nil, fmt.Errorf("latency alone: %w", err)
		}
		lat[i] = rcv.at(id).Sub(accepted)
	}
	slices.Sort(lat)
	return lat, nil
}

// percentile of sorted durations (nearest rank).
func percentile(sorted []time.Duration, p int) time.Duration {
	return sorted[min(len(sorted)-1, len(sorted)*p/100)]
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
