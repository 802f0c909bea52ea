package e2e

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/mailyard/mailyard/internal/secrets"
	"github.com/mailyard/mailyard/internal/store"
	"github.com/mailyard/mailyard/internal/testenv"
	"github.com/mailyard/mailyard/workflows/deletion"
	"github.com/mailyard/mailyard/workflows/rotation"
)

// platformReceiver is a plain HTTP webhook receiver that keeps the platform
// events it gets.
type platformReceiver struct {
	mu     sync.Mutex
	events []map[string]any
}

func (r *platformReceiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	var ev map[string]any
	if err := json.NewDecoder(req.Body).Decode(&ev); err == nil {
		r.mu.Lock()
		r.events = append(r.events, ev)
		r.mu.Unlock()
	}
	w.WriteHeader(http.StatusNoContent)
}

// of returns the data of the events of one type.
func (r *platformReceiver) of(eventType string) []map[string]any {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []map[string]any
	for _, ev := range r.events {
		if ev["event_type"] == eventType {
			out = append(out, ev["data"].(map[string]any))
		}
	}
	return out
}

// The whole life of a domain through the real processes: added, verified by its
// records in a real DNS zone (whose DKIM CNAMEs resolve into `mailyard dns`),
// rotated, deleted; with the domain.* events at a webhook, credentials revoked by
// the deletion, the keys gone from DNS after the retain time, and no key material
// in any workflow history.
func TestDomainLifecycleEndToEnd(t *testing.T) {
	t.Parallel()
	s := startStack(t, topology{env: []string{
		"MAILYARD_VERIFY_SCHEDULE=1s/60s",
		"MAILYARD_DKIM_RETAIN=4s",
		"MAILYARD_DKIM_RECHECK=1s",
		"MAILYARD_WEBHOOK_ALLOW_HTTP=true",
		"MAILYARD_WEBHOOK_ALLOW_PRIVATE_NETWORKS=true",
	}})
	s.customer.Forward("dkim.mailyard.test", s.dnsAddr)
	rcv := &platformReceiver{}
	hook := httptest.NewServer(rcv)
	t.Cleanup(hook.Close)
	api := s.api()
	api.createWebhook(hook.URL+"/hooks", "domain.verified", "domain.dkim_rotated", "domain.deleted")

	// Added, and verified by the onboarding workflow once the records exist.
	added := api.addDomain("shop.example", "")
	id := added.Domain.ID
	token := strings.TrimSuffix(added.DNSRecords[0].Value, "-1.dkim.mailyard.test")
	sel1, sel2 := token+"-1", token+"-2"
	s.customer.Add(t, sel1+"._domainkey.shop.example. 300 IN CNAME "+sel1+".dkim.mailyard.test.")
	s.customer.Add(t, sel2+"._domainkey.shop.example. 300 IN CNAME "+sel2+".dkim.mailyard.test.")
	s.customer.Add(t, `mail.shop.example. 300 IN TXT "v=spf1 include:spf.mailyard.test ~all"`)
	s.customer.Add(t, "mail.shop.example. 300 IN MX 10 bounces.mailyard.test.")
	path := fmt.Sprintf("/api/v1/domains/%d", id)
	var dom DomainDetail
	testenv.Eventually(t, 60*time.Second, "domain verified", func() bool {
		dom = api.domain(id)
		return dom.Status == "verified"
	})
	dkim := dom.DKIM
	rot := dkim.Rotation
	if dkim.ActiveSelector != sel1 || !rot.Enabled || rot.IntervalDays != 180 ||
		rot.InProgress || rot.NextRotationAt == nil || dom.VerifiedAt == nil {
		t.Fatalf("verified domain: %+v", dom)
	}
	assertKeys(t, dkim, map[string]string{sel1: "active", sel2: "standby"})
	testenv.Eventually(t, 30*time.Second, "domain.verified webhook", func() bool { return len(rcv.of("domain.verified")) == 1 })
	if ev := rcv.of("domain.verified")[0]; ev["domain"] != "shop.example" || ev["status"] != "verified" || ev["domain_id"] != float64(id) {
		t.Fatalf("domain.verified data: %v", ev)
	}

	// A credential scoped to the domain.
	secretKey := api.createCredential(id, "shop", "admin").SecretKey
	if status := api.as(secretKey).status("GET", "/api/v1/domains"); status != 200 {
		t.Fatalf("credential before deletion: %d", status)
	}

	// Key material to look for in histories, read before rotation and deletion
	// erase the private keys.
	needles := keyNeedles(t, s, id)
	oldStandbyTXT := queryTXT(t, s.dnsAddr, sel1+".dkim.mailyard.test.")

	// Rotate: the standby key (selector 2) is confirmed through the CNAME and signs.
	if rotated := api.rotate(id); rotated.ActiveSelector != sel1 || rotated.NextSelector != sel2 {
		t.Fatalf("rotate answer: %+v", rotated)
	}
	rotationRun := s.temporalC.GetWorkflow(context.Background(), rotation.WorkflowID(id), "").GetRunID()
	api.fail("POST", path+"/dkim/rotate", 409, "rotation_in_progress")
	testenv.Eventually(t, 30*time.Second, "switched to selector 2", func() bool {
		return api.domain(id).DKIM.ActiveSelector == sel2
	})
	// After the retain time selector 1 holds a fresh key: published, standby.
	testenv.Eventually(t, 30*time.Second, "rotation done", func() bool {
		dom = api.domain(id)
		return !dom.DKIM.Rotation.InProgress
	})
	dkim = dom.DKIM
	assertKeys(t, dkim, map[string]string{sel2: "active", sel1: "standby"})
	// The next cycle waits in a new run of the same workflow type. The run
	// continues as new in the workflow task after the one that recorded the
	// rotation's end, so the new run may appear a moment after the database
	// says the rotation is done.
	testenv.Eventually(t, 30*time.Second, "a new rotation run", func() bool {
		desc, err := s.temporalC.DescribeWorkflowExecution(context.Background(), rotation.WorkflowID(id), "")
		if err != nil || desc.WorkflowExecutionInfo.Type.Name != rotation.WorkflowName {
			t.Fatalf("rotation workflow after a cycle: %v %v", desc, err)
		}
		return desc.WorkflowExecutionInfo.Execution.RunId != rotationRun
	})
	if dkim.Rotation.LastRotatedAt == nil {
		t.Fatalf("no last_rotated_at: %+v", dkim)
	}
	st := testenv.OpenStore(t, s.databaseURL)
	active, err := st.DKIMKeyInState(context.Background(), id, store.DKIMActive)
	if err != nil || active.Selector != sel2 {
		t.Fatalf("active key in the store: %v %v", active, err)
	}
	if txt := queryTXT(t, s.dnsAddr, sel2+".dkim.mailyard.test."); txt != "v=DKIM1; k=rsa; p="+active.PublicKey {
		t.Fatalf("the TXT at the active selector is not the active key: %q", txt)
	}
	if txt := queryTXT(t, s.dnsAddr, sel1+".dkim.mailyard.test."); txt == "" || txt == oldStandbyTXT {
		t.Fatalf("selector 1 was not given a fresh key: %q", txt)
	}
	testenv.Eventually(t, 30*time.Second, "domain.dkim_rotated webhook", func() bool { return len(rcv.of("domain.dkim_rotated")) == 1 })
	if ev := rcv.of("domain.dkim_rotated")[0]; ev["active_selector"] != sel2 {
		t.Fatalf("domain.dkim_rotated data: %v", ev)
	}
	needles = append(needles, keyNeedles(t, s, id)...)
	rotationHistory := s.historyJSON(rotation.WorkflowID(id), rotationRun)
	recordHistory(t, "../../workflows/rotation/testdata/dkim-rotation-v1-rotated.json", rotationHistory)

	// Delete: gone for the customer before the answer, its credential revoked.
	if deleted := api.deleteDomain(id); deleted.Status != "deleted" || deleted.Domain != "shop.example" {
		t.Fatalf("delete answer: %+v", deleted)
	}
	api.fail("GET", path, 404, "not_found")
	api.fail("DELETE", path, 404, "not_found")
	if list := api.domains(); len(list) != 0 {
		t.Fatalf("deleted domain still listed: %+v", list)
	}
	if status := api.as(secretKey).status("GET", "/api/v1/domains"); status != 401 {
		t.Fatalf("credential of a deleted domain answers %d, want 401", status)
	}
	// The name can be added again at once, with a new token.
	if v := api.addDomain("shop.example", "").DNSRecords[0].Value; strings.HasPrefix(v, token) {
		t.Fatalf("re-added domain reuses the token: %s", v)
	}

	// The keys stay in DNS for the retain time, then both names are gone.
	if queryTXT(t, s.dnsAddr, sel2+".dkim.mailyard.test.") == "" {
		t.Fatal("the active key left DNS at once; it must stay for the retain time")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := s.temporalC.GetWorkflow(ctx, deletion.WorkflowID(id), "").Get(ctx, nil); err != nil {
		t.Fatalf("deletion workflow: %v", err)
	}
	for _, sel := range []string{sel1, sel2} {
		if rcode := queryRcode(t, s.dnsAddr, sel+".dkim.mailyard.test."); rcode != dns.RcodeNameError {
			t.Fatalf("%s answers %s after the retain time, want NXDOMAIN", sel, dns.RcodeToString[rcode])
		}
	}
	left, _ := st.CurrentDKIMKeys(context.Background(), id)
	if len(left) != 0 {
		t.Fatalf("keys left after deletion: %v", left)
	}
	testenv.Eventually(t, 30*time.Second, "domain.deleted webhook", func() bool { return len(rcv.of("domain.deleted")) == 1 })
	deletionHistory := s.historyJSON(deletion.WorkflowID(id), "")
	recordHistory(t, "../../workflows/deletion/testdata/domain-deletion-v1-done.json", deletionHistory)

	for name, h := range map[string][]byte{"rotation": rotationHistory, "deletion": deletionHistory,
		"onboarding": s.historyJSON(fmt.Sprintf("domain-onboarding:%d", id), "")} {
		if found := contains(h, append(needles, "PRIVATE KEY", "BEGIN ", "MIIEv", "MIIBIj", "v=DKIM1", "shop.example")...); found != "" {
			t.Fatalf("%s history holds %q", name, found)
		}
	}
}

// assertKeys checks the dkim.keys of a domain: selector → state.
func assertKeys(t *testing.T, dkim DKIMState, want map[string]string) {
	t.Helper()
	got := map[string]string{}
	for _, key := range dkim.Keys {
		if key.Bits != 2048 || key.CreatedAt == nil {
			t.Fatalf("key %+v", key)
		}
		got[key.Selector] = key.State
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("keys %v, want %v", got, want)
	}
}

// keyNeedles are pieces of a domain's current keys, private ones decrypted.
func keyNeedles(t *testing.T, s *stack, domainID int64) []string {
	t.Helper()
	st := testenv.OpenStore(t, s.databaseURL)
	ks, err := st.CurrentDKIMKeys(context.Background(), domainID)
	if err != nil || len(ks) < 2 {
		t.Fatalf("keys of %d: %v %v", domainID, ks, err)
	}
	raw, _ := base64.StdEncoding.DecodeString(testEncryptionKey)
	box, err := secrets.New(raw)
	if err != nil {
		t.Fatal(err)
	}
	var needles []string
	for _, k := range ks {
		der, err := box.Open(k.PrivateKeyEnc, store.DKIMKeyBinding(k.Selector, k.Generation))
		if err != nil {
			t.Fatalf("decrypt %s#%d: %v", k.Selector, k.Generation, err)
		}
		b64 := base64.StdEncoding.EncodeToString(der)
		needles = append(needles, b64[:64], b64[len(b64)/2:len(b64)/2+64], k.PublicKey[:64], k.PublicKey[len(k.PublicKey)-64:])
	}
	return needles
}

// queryRcode asks the DNS server at addr for name's TXT records and returns the
// response code.
func queryRcode(t *testing.T, addr, name string) int {
	t.Helper()
	m := new(dns.Msg)
	m.SetQuestion(name, dns.TypeTXT)
	in, err := dns.Exchange(m, addr)
	if err != nil {
		t.Fatalf("query %s: %v", name, err)
	}
	return in.Rcode
}
