package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/mailyard/mailyard/internal/store"
	"github.com/mailyard/mailyard/internal/testenv"
	"github.com/mailyard/mailyard/workflows/deletion"
	"github.com/mailyard/mailyard/workflows/onboarding"
	"github.com/mailyard/mailyard/workflows/rotation"
)

// TestFaultBINDStoppedDuringLifecycle: Mailyard publishes the DKIM keys to a
// real BIND 9 primary with RFC 2136 (api, worker and dns processes configured
// as an operator would), and BIND is stopped while onboarding publishes the
// keys, while a rotation replaces the retired key and while a deletion removes
// them. Each step is retried while BIND is down and completes once it is back;
// BIND then serves exactly the keys the database says.
func TestFaultBINDStoppedDuringLifecycle(t *testing.T) {
	t.Parallel()
	const zone = "dkim.mailyard.test"
	bind := testenv.StartBIND(t, zone)
	s := startStack(t, topology{env: []string{
		"MAILYARD_DNS_PUBLISHER=rfc2136",
		"MAILYARD_RFC2136_SERVER=" + bind.Addr,
		"MAILYARD_RFC2136_TSIG=" + bind.UpdateKey,
		"MAILYARD_DKIM_HOST=" + zone,
		"MAILYARD_VERIFY_SCHEDULE=1s/180s",
		"MAILYARD_DKIM_RETAIN=6s",
		"MAILYARD_DKIM_RECHECK=1s",
	}})
	// The customer's CNAMEs lead into BIND's zone, as the world would see it.
	s.customer.Forward(zone, bind.Addr)
	st := testenv.OpenStore(t, s.databaseURL)
	ctx := context.Background()
	// keyIs checks that BIND serves the store's key of that state at its selector.
	keyIs := func(id int64, state string) *store.DKIMKey {
		t.Helper()
		k, err := st.DKIMKeyInState(ctx, id, state)
		if err != nil {
			t.Fatalf("%s key: %v", state, err)
		}
		if got, want := txtAt(t, bind.Addr, k.Selector+"."+zone), "v=DKIM1; k=rsa; p="+k.PublicKey; got != want {
			t.Fatalf("BIND serves %q at the %s selector %s, want the store's key", got, state, k.Selector)
		}
		return k
	}

	// Onboarding with BIND down: the domain is added, the publication is
	// retried, and the keys reach BIND once it is back.
	bind.Stop()
	api := s.api()
	added := api.addDomain("shop.example", "")
	id := added.Domain.ID
	token := strings.TrimSuffix(added.DNSRecords[0].Value, "-1."+zone)
	sel1, sel2 := token+"-1", token+"-2"
	failure := s.waitActivityRetrying(onboarding.WorkflowID(id), onboarding.PublishKeysActivity, 60*time.Second)
	t.Logf("onboarding's publication fails while BIND is down: %s", failure)
	if st := api.domain(id).Status; st != "pending" {
		t.Fatalf("domain while BIND is down: %v", st)
	}
	bind.Start()
	testenv.Eventually(t, 60*time.Second, "both keys in BIND and recorded as published", func() bool {
		if _, err := st.DKIMKeyInState(ctx, id, store.DKIMStandby); err != nil {
			return false
		}
		return txtAt(t, bind.Addr, sel1+"."+zone) != "" && txtAt(t, bind.Addr, sel2+"."+zone) != ""
	})
	oldActive := keyIs(id, store.DKIMActive)
	keyIs(id, store.DKIMStandby)
	s.customer.Add(t, sel1+"._domainkey.shop.example. 300 IN CNAME "+sel1+"."+zone+".")
	s.customer.Add(t, sel2+"._domainkey.shop.example. 300 IN CNAME "+sel2+"."+zone+".")
	s.customer.Add(t, `mail.shop.example. 300 IN TXT "v=spf1 include:spf.mailyard.test ~all"`)
	s.customer.Add(t, "mail.shop.example. 300 IN MX 10 bounces.mailyard.test.")
	testenv.Eventually(t, 60*time.Second, "domain verified", func() bool {
		return api.domain(id).Status == "verified"
	})

	// Rotation: BIND stopped once the keys have switched, so the replacement
	// of the retired key finds it down.
	api.rotate(id)
	testenv.Eventually(t, 60*time.Second, "switched to selector 2", func() bool {
		return api.domain(id).DKIM.ActiveSelector == sel2
	})
	bind.Stop()
	failure = s.waitActivityRetrying(rotation.WorkflowID(id), rotation.ReplaceActivity, 60*time.Second)
	t.Logf("the replacement fails while BIND is down: %s", failure)
	if rot := api.domain(id).DKIM.Rotation; !rot.InProgress {
		t.Fatalf("rotation while its replacement fails: %+v", rot)
	}
	bind.Start()
	testenv.Eventually(t, 90*time.Second, "rotation done", func() bool {
		return !api.domain(id).DKIM.Rotation.InProgress
	})
	if k := keyIs(id, store.DKIMActive); k.Selector != sel2 {
		t.Fatalf("active selector after the rotation: %s", k.Selector)
	}
	if k := keyIs(id, store.DKIMStandby); k.Selector != sel1 || k.PublicKey == oldActive.PublicKey {
		t.Fatalf("standby after the rotation: %s, fresh key: %v", k.Selector, k.PublicKey != oldActive.PublicKey)
	}

	// Deletion: BIND down when the keys are to leave DNS after the retain time.
	api.deleteDomain(id)
	bind.Stop()
	failure = s.waitActivityRetrying(deletion.WorkflowID(id), deletion.UnpublishActivity, 60*time.Second)
	t.Logf("the removal fails while BIND is down: %s", failure)
	// The keys are erased only once DNS no longer serves them. (Asking BIND
	// after its restart whether the key is still there would race the retry.)
	if n := privateKeysOf(ctx, t, st, id); n != 2 {
		t.Fatalf("%d private keys kept while their removal from DNS fails, want 2", n)
	}
	bind.Start()
	wctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	if err := s.temporalC.GetWorkflow(wctx, deletion.WorkflowID(id), "").Get(wctx, nil); err != nil {
		t.Fatalf("deletion workflow: %v", err)
	}
	for _, sel := range []string{sel1, sel2} {
		if in := askTCP(t, bind.Addr, sel+"."+zone); in.Rcode != dns.RcodeNameError {
			t.Fatalf("BIND answers %s for %s after the deletion, want NXDOMAIN", dns.RcodeToString[in.Rcode], sel)
		}
	}
	if n := privateKeysOf(ctx, t, st, id); n != 0 {
		t.Fatalf("%d private keys left after the deletion", n)
	}
}

// privateKeysOf counts the domain's DKIM keys whose private key is stored.
func privateKeysOf(ctx context.Context, t *testing.T, st *store.Store, domainID int64) int64 {
	t.Helper()
	n, err := st.DB.NewSelect().Model((*store.DKIMKey)(nil)).Where("domain_id = ?", domainID).Where("private_key_enc IS NOT NULL").Count(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestFaultWebhookReceiversHang: three webhooks whose receivers misbehave, one
// that accepts the connection and never answers, one that sends its answer a
// byte a second, one that answers 200 at once and then sends its body a byte a
// second, and a healthy one, all subscribed to the same events. Each attempt to
// the first two ends at the 15-second limit as a failed attempt ("timed out
// after 15s") and is retried on the schedule (the second attempt 5 s later);
// the third's 200 came in time, so its delivery is delivered, the attempt also
// cut at 15 s. Meanwhile the healthy webhook receives every event within
// seconds: the hanging attempts starve nobody. Every delivery arrives with its
// own id, and again only with the same bytes.
func TestFaultWebhookReceiversHang(t *testing.T) {
	heavy(t)
	const events = 30
	healthy, caFile := startHookReceiver(t)
	silent := startBadReceiver(t, "", "")
	trickle := startBadReceiver(t, "", "HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n")
	// Acknowledges at once, then sends its body a byte a second.
	slowBody := startBadReceiver(t, "HTTP/1.1 200 OK\r\nContent-Length: 40\r\nConnection: close\r\n\r\n", "acknowledged, and slowly saying so......")
	s := startStack(t, topology{env: []string{
		"MAILYARD_WEBHOOK_ALLOW_HTTP=true",
		"MAILYARD_WEBHOOK_ALLOW_PRIVATE_NETWORKS=true",
		"SSL_CERT_FILE=" + caFile,
	}})
	ctx := context.Background()
	st := testenv.OpenStore(t, s.databaseURL)
	org, err := st.OrganizationByName(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	if err := st.CreateDomain(ctx, &store.Domain{OrganizationID: org.ID, Domain: "shop.example", MailFromSubdomain: "mail.shop.example", DKIMToken: "faultwebhooktoken", Status: store.DomainVerified}, nil); err != nil {
		t.Fatal(err)
	}
	hook := func(url string) int64 {
		created := s.api().createWebhook(url, "delivered")
		if strings.HasPrefix(url, "https:") {
			healthy.secret = created.SigningSecret
		}
		return created.Webhook.ID
	}
	silentID, trickleID, slowBodyID, healthyID := hook(silent.URL), hook(trickle.URL), hook(slowBody.URL), hook(healthy.URL+"/hook")

	// When each delivery id reached the healthy receiver, seen by polling.
	var mu sync.Mutex
	arrived := map[string]time.Time{}
	stopWatch := make(chan struct{})
	go func() {
		for {
			healthy.mu.Lock()
			now := time.Now()
			mu.Lock()
			for id := range healthy.bodies {
				if _, ok := arrived[id]; !ok {
					arrived[id] = now
				}
			}
			mu.Unlock()
			healthy.mu.Unlock()
			select {
			case <-stopWatch:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	defer close(stopWatch)

	// The events, from a few concurrent senders; each fans out to the four
	// webhooks.
	ingested := make([]time.Time, events)
	ids := make([][]string, events)
	var wg sync.WaitGroup
	for sender := range 4 {
		wg.Go(func() {
			for i := sender; i < events; i += 4 {
				ids[i] = ingest(t, s.internal[0], i)
				ingested[i] = time.Now()
			}
		})
	}
	wg.Wait()
	want := map[string]bool{}
	for i := range events {
		if len(ids[i]) != 4 {
			t.Fatalf("event %d fanned out to %d deliveries, want 4", i, len(ids[i]))
		}
		for _, id := range ids[i] {
			want[id] = true
		}
	}

	// The healthy webhook gets every event promptly, while the bad receivers
	// hold their attempts open.
	testenv.Eventually(t, 30*time.Second, "every event at the healthy receiver", func() bool { return healthy.distinct() >= events })
	if d := healthy.checkArrivals(t, want); d != 0 {
		t.Fatalf("%d duplicates at the healthy receiver", d)
	}
	var slowest time.Duration
	now := time.Now()
	healthy.mu.Lock()
	mu.Lock()
	for i := range events {
		for _, id := range ids[i] {
			if _, mine := healthy.bodies[id]; !mine {
				continue // another webhook's delivery
			}
			at, seen := arrived[id]
			if !seen {
				at = now // arrived since the watcher last looked
			}
			slowest = max(slowest, at.Sub(ingested[i]))
		}
	}
	mu.Unlock()
	healthy.mu.Unlock()
	if slowest > 10*time.Second {
		t.Fatalf("the healthy webhook waited up to %s for an event while the others hung", slowest)
	}
	t.Logf("the healthy webhook got each of %d events within %s", events, slowest.Round(time.Millisecond))
	// Meanwhile every attempt to the silent receiver is open at once.
	testenv.Eventually(t, 10*time.Second, "every delivery held by the silent receiver", func() bool { return len(silent.seen(t)) == events })

	// Each bad delivery: two attempts, each timed out after 15 s, the second
	// about 5 s after the first ended; still pending, its next attempt
	// scheduled.
	for name, webhookID := range map[string]int64{"silent": silentID, "trickling": trickleID} {
		var deliveries []Delivery
		testenv.Eventually(t, 90*time.Second, name+" deliveries with two attempts", func() bool {
			deliveries = s.api().deliveries(webhookID)
			if len(deliveries) != events {
				return false
			}
			for _, d := range deliveries {
				if len(d.Attempts) < 2 {
					return false
				}
			}
			return true
		})
		for _, dl := range deliveries {
			attempts := dl.Attempts
			if dl.Status != "pending" || len(attempts) != 2 || !want[dl.ID] {
				t.Fatalf("%s delivery: %+v", name, dl)
			}
			var times []time.Time
			for _, at := range attempts {
				ms := at.DurationMS
				if at.StatusCode != nil || deref(at.Error) != "timed out after 15s" || ms < 15000 || ms > 17000 {
					t.Fatalf("%s attempt: %+v", name, at)
				}
				times = append(times, at.AttemptedAt)
			}
			// Newest first or oldest first: the gap is the same.
			if gap := times[0].Sub(times[1]).Abs(); gap < 18*time.Second || gap > 30*time.Second {
				t.Fatalf("%s delivery %s: attempts %s apart, want 15 s + 5 s ± 20 %%", name, dl.ID, gap)
			}
			desc, err := s.temporalC.DescribeWorkflowExecution(ctx, "webhook-delivery:"+dl.ID, "")
			if err != nil || desc.WorkflowExecutionInfo.Status.String() != "Running" {
				t.Fatalf("%s delivery %s: workflow %v %v", name, dl.ID, desc, err)
			}
		}
	}
	for name, r := range map[string]*badReceiver{"silent": silent, "trickling": trickle} {
		for id, n := range r.seen(t) {
			if !want[id] || n != 2 {
				t.Fatalf("%s receiver: delivery %s arrived %d times, want 2 (one per attempt)", name, id, n)
			}
		}
	}
	// The receiver that acknowledged with its status line in time has the
	// delivery: the attempt still ends at 15 s, keeping what of the body came.
	slow := s.api().deliveries(slowBodyID)
	if len(slow) != events {
		t.Fatalf("%d deliveries to the slow-body receiver, want %d", len(slow), events)
	}
	for _, dl := range slow {
		attempts := dl.Attempts
		if dl.Status != "delivered" || len(attempts) != 1 {
			t.Fatalf("delivery acknowledged with a slow body: %+v", dl)
		}
		at := attempts[0]
		if ms := at.DurationMS; at.StatusCode == nil || *at.StatusCode != 200 || at.Error != nil || ms < 15000 || ms > 17000 ||
			!strings.HasPrefix("acknowledged, and slowly saying so......", at.ResponseBody) {
			t.Fatalf("attempt acknowledged with a slow body: %+v", at)
		}
	}
	for id, n := range slowBody.seen(t) {
		if !want[id] || n != 1 {
			t.Fatalf("slow-body receiver: delivery %s arrived %d times, want 1", id, n)
		}
	}
	for _, dl := range s.api().deliveries(healthyID) {
		if dl.Status != "delivered" || len(dl.Attempts) != 1 {
			t.Fatalf("healthy delivery: %+v", dl)
		}
	}
}

// TestFaultAPIKilledMidIdempotentPOSTs: two api processes on one database
// answer many concurrent POST /api/v1/webhooks with Idempotency-Key, one of
// them is SIGKILLed in the middle, a new one starts, and every request is sent
// again with its key to the processes alive. No webhook is created twice, and
// every retry answers with the webhook (id and signing secret) of any earlier
// success; keys the killed process held are free again within seconds.
func TestFaultAPIKilledMidIdempotentPOSTs(t *testing.T) {
	heavy(t)
	const orgs, perOrg, senders = 5, 18, 15 // 18: under the 20 webhooks an organization may have
	// The rate limit is not under test: no 429 may stand for a cut request.
	// Two api processes of the test's own (startAPI below), one to kill.
	s := startStack(t, topology{noAPI: true, noWorker: true, noDNS: true,
		env: []string{"MAILYARD_WEBHOOK_ALLOW_HTTP=true", "MAILYARD_WEBHOOK_ALLOW_PRIVATE_NETWORKS=true", "MAILYARD_RATE_LIMIT=off"}})
	apiKeys := []string{s.adminKey}
	for i := 1; i < orgs; i++ {
		key := regexp.MustCompile(`myk_[0-9A-Za-z]+`).FindString(s.run("org", "create", fmt.Sprintf("org%d", i)))
		if key == "" {
			t.Fatal("org create printed no key")
		}
		apiKeys = append(apiKeys, key)
	}
	// startAPI runs an api process on listeners of its own.
	startAPI := func() (*testenv.Process, string) {
		httpAddr, internalAddr := testenv.FreeAddr(t), testenv.FreeAddr(t)
		p := testenv.Start(t, slices.Concat(s.env, []string{"MAILYARD_HTTP_ADDR=" + httpAddr, "MAILYARD_INTERNAL_ADDR=" + internalAddr}), "api")
		testenv.WaitListening(t, httpAddr, 30*time.Second)
		return p, "http://" + httpAddr
	}
	doomed, doomedURL := startAPI()
	_, survivorURL := startAPI()

	type request struct {
		apiKey, key string
		body        map[string]any
	}
	var requests []request
	for o, apiKey := range apiKeys {
		for i := range perOrg {
			requests = append(requests, request{apiKey: apiKey, key: fmt.Sprintf("fault-%d-%d", o, i),
				body: map[string]any{"url": fmt.Sprintf("http://127.0.0.1:9/hooks/%d/%d", o, i), "event_types": []string{"delivered"}}})
		}
	}
	type created struct{ id, secret string }
	decode := func(a keyedAnswer) created {
		var env struct {
			Data struct {
				Webhook       struct{ ID json.Number }
				SigningSecret string `json:"signing_secret"`
			}
		}
		d := json.NewDecoder(bytes.NewReader(a.body))
		d.UseNumber()
		if err := d.Decode(&env); err != nil || env.Data.Webhook.ID == "" || env.Data.SigningSecret == "" {
			t.Fatalf("answer %d %s: %v", a.status, a.body, err)
		}
		return created{id: env.Data.Webhook.ID.String(), secret: env.Data.SigningSecret}
	}

	// First round: each sender sends its requests one after the other, to
	// either process; the doomed one is killed once a third were answered.
	first := make([]*keyedAnswer, len(requests))
	var answered atomic.Int32
	var wg sync.WaitGroup
	for sender := range senders {
		wg.Go(func() {
			for i := sender; i < len(requests); i += senders {
				r := requests[i]
				url := survivorURL
				if i%2 == 0 {
					url = doomedURL
				}
				if a, err := clientAt(t, url, r.apiKey).postWithKey("/api/v1/webhooks", r.key, r.body); err == nil {
					first[i] = &a
				}
				answered.Add(1)
			}
		})
	}
	testenv.Eventually(t, 60*time.Second, "a third of the answers", func() bool { return answered.Load() >= int32(len(requests)/3) })
	doomed.Kill()
	wg.Wait()
	st := testenv.OpenStore(t, s.databaseURL)
	ctx := context.Background()
	inProgress, err := st.DB.NewSelect().Model((*store.IdempotencyKey)(nil)).Where("response_status IS NULL").Count(ctx)
	if err != nil {
		t.Fatal(err)
	}
	lost := 0
	for i, a := range first {
		switch {
		case a == nil:
			lost++
		case a.status != 201:
			t.Fatalf("request %d: %d %s", i, a.status, a.body)
		}
	}
	t.Logf("the kill cut %d of %d requests; %d keys were left claimed", lost, len(requests), inProgress)
	if lost == 0 {
		t.Fatal("the kill cut no request: it came too late to test anything")
	}

	// A new api process; every request again, with its key, on the processes
	// alive, until each is answered.
	_, newURL := startAPI()
	killedAt := time.Now()
	final := make([]created, len(requests))
	retry := func(i int) {
		r := requests[i]
		url := survivorURL
		if i%2 == 0 {
			url = newURL
		}
		for {
			a, err := clientAt(t, url, r.apiKey).postWithKey("/api/v1/webhooks", r.key, r.body)
			if err != nil {
				t.Errorf("retry %d: %v", i, err)
				return
			}
			if a.status == 409 && bytes.Contains(a.body, []byte("idempotency_in_progress")) && time.Since(killedAt) < 60*time.Second {
				time.Sleep(time.Second) // the dead process's claim has not run out yet
				continue
			}
			if a.status != 201 {
				t.Errorf("retry %d: %d %s", i, a.status, a.body)
				return
			}
			final[i] = decode(a)
			if first[i] != nil && (!a.replayed || !bytes.Equal(a.body, first[i].body)) {
				t.Errorf("retry %d after a success: replayed %v, body %s, first %s", i, a.replayed, a.body, first[i].body)
			}
			return
		}
	}
	for sender := range senders {
		wg.Go(func() {
			for i := sender; i < len(requests); i += senders {
				retry(i)
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	t.Logf("every retry answered within %s of the kill", time.Since(killedAt).Round(time.Second))

	// One webhook per request: per organization through the API, and by URL
	// in the store.
	for o, apiKey := range apiKeys {
		hooks := clientAt(t, survivorURL, apiKey).webhooks()
		if len(hooks) != perOrg {
			t.Fatalf("organization %d has %d webhooks, want %d", o, len(hooks), perOrg)
		}
		ids := map[string]bool{}
		for _, h := range hooks {
			ids[fmt.Sprint(h.ID)] = true
		}
		for i := range perOrg {
			if id := final[o*perOrg+i].id; !ids[id] {
				t.Fatalf("request %d-%d answered webhook %s, which the list does not hold", o, i, id)
			}
		}
	}
	var dups []struct {
		URL string `bun:"url"`
		N   int    `bun:"n"`
	}
	if err := st.DB.NewSelect().Model((*store.Webhook)(nil)).ColumnExpr("url, count(*) AS n").Group("url").Having("count(*) > 1").Scan(ctx, &dups); err != nil {
		t.Fatal(err)
	}
	if total, err := st.DB.NewSelect().Model((*store.Webhook)(nil)).Count(ctx); err != nil || total != int64(len(requests)) || len(dups) != 0 {
		t.Fatalf("%d webhooks in the store for %d requests, created more than once: %v (%v)", total, len(requests), dups, err)
	}
}
