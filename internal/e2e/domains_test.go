package e2e

import (
	"context"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/mailyard/mailyard/internal/secrets"
	"github.com/mailyard/mailyard/internal/testenv"
	"github.com/mailyard/mailyard/workflows/onboarding"
)

// The whole domain flow through the real processes: add a domain, see its DKIM keys
// served by `mailyard dns`, create the customer's records in a real DNS zone,
// verify, and find no key material in any Temporal history of the run. A second
// domain lets its window run out, fails, and is verified in a new window.
func TestDomainOnboardingEndToEnd(t *testing.T) {
	t.Parallel()
	// A short schedule: a check every second, a window of 20 seconds.
	s := startStack(t, topology{env: []string{"MAILYARD_VERIFY_SCHEDULE=1s/20s"}})

	api := s.api()
	added := api.addDomain("Example.COM.", "")
	dom := added.Domain
	if dom.Domain != "example.com" || dom.Status != "pending" || dom.MailFromSubdomain != "mail.example.com" {
		t.Fatalf("added %+v", dom)
	}
	id := dom.ID
	records := added.DNSRecords
	if len(records) != 4 {
		t.Fatalf("records %+v", records)
	}
	cname1 := records[0]
	token := strings.TrimSuffix(cname1.Value, "-1.dkim.mailyard.test")
	if len(token) != 32 || cname1.Name != token+"-1._domainkey.example.com" {
		t.Fatalf("DKIM record 1 %+v", cname1)
	}

	// The embedded DNS server publishes both keys: 2048-bit RSA.
	for _, n := range []int{1, 2} {
		name := fmt.Sprintf("%s-%d.dkim.mailyard.test.", token, n)
		var txt string
		testenv.Eventually(t, 30*time.Second, "DKIM key "+name+" in DNS", func() bool {
			txt = queryTXT(t, s.dnsAddr, name)
			return txt != ""
		})
		p := strings.TrimPrefix(txt, "v=DKIM1; k=rsa; p=")
		der, err := base64.StdEncoding.DecodeString(p)
		if err != nil {
			t.Fatalf("%s: %q: %v", name, txt, err)
		}
		pub, err := x509.ParsePKIXPublicKey(der)
		if err != nil || pub.(*rsa.PublicKey).N.BitLen() != 2048 {
			t.Fatalf("%s: not a 2048-bit RSA key: %v", name, err)
		}
	}

	// Nothing in the customer's zone yet: the records are pending (not found).
	for _, r := range api.dnsRecords(id).DNSRecords {
		if r.Status != "pending" {
			t.Fatalf("record before creation: %+v", r)
		}
	}

	// The customer creates the four records; Verify sees them at once.
	s.customer.Add(t, token+"-1._domainkey.example.com. 300 IN CNAME "+token+"-1.dkim.mailyard.test.")
	s.customer.Add(t, token+"-2._domainkey.example.com. 300 IN CNAME "+token+"-2.dkim.mailyard.test.")
	s.customer.Add(t, `mail.example.com. 300 IN TXT "v=spf1 include:spf.mailyard.test ~all"`)
	s.customer.Add(t, "mail.example.com. 300 IN MX 10 bounces.mailyard.test.")
	verified := api.verify(id)
	if verified.Domain.Status != "verified" {
		t.Fatalf("after verify: %+v", verified)
	}
	for _, rec := range verified.DNSRecords {
		if rec.Status != "verified" || rec.CheckedAt == nil || len(rec.Observed) == 0 {
			t.Fatalf("record after verify: %+v", rec)
		}
	}

	// The onboarding run ends verified.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var result onboarding.Result
	if err := s.temporalC.GetWorkflow(ctx, onboarding.WorkflowID(id), "").Get(ctx, &result); err != nil || result.Status != "verified" {
		t.Fatalf("workflow result %v %v", result, err)
	}
	history := s.historyJSON(onboarding.WorkflowID(id), "")
	assertNoKeyMaterial(t, s, id, history)
	recordHistory(t, "../../workflows/onboarding/testdata/onboarding-v2-verified-by-update.json", history)

	// A second domain whose records never appear: failed when the window closes.
	other := api.addDomain("other.example", "bounce.other.example")
	otherID := other.Domain.ID
	var failed onboarding.Result
	ctx2, cancel2 := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel2()
	firstRun := s.temporalC.GetWorkflow(ctx2, onboarding.WorkflowID(otherID), "")
	if err := firstRun.Get(ctx2, &failed); err != nil || failed.Status != "failed" {
		t.Fatalf("second domain: %v %v", failed, err)
	}
	failedHistory := s.historyJSON(onboarding.WorkflowID(otherID), firstRun.GetRunID())
	assertNoKeyMaterial(t, s, otherID, failedHistory)
	recordHistory(t, "../../workflows/onboarding/testdata/onboarding-v2-failed.json", failedHistory)
	if st := api.dnsRecords(otherID).Domain.Status; st != "failed" {
		t.Fatalf("status after the window: %v", st)
	}

	// Its records appear late; Verify opens a new window and verifies at once.
	otherToken := strings.SplitN(other.DNSRecords[0].Name, "-", 2)[0]
	s.customer.Add(t, otherToken+"-1._domainkey.other.example. 300 IN CNAME "+otherToken+"-1.dkim.mailyard.test.")
	s.customer.Add(t, otherToken+"-2._domainkey.other.example. 300 IN CNAME "+otherToken+"-2.dkim.mailyard.test.")
	s.customer.Add(t, `bounce.other.example. 300 IN TXT "v=spf1 ip4:192.0.2.1 include:spf.mailyard.test -all"`)
	s.customer.Add(t, "bounce.other.example. 300 IN MX 10 bounces.mailyard.test.")
	if again := api.verify(otherID); again.Domain.Status != "verified" {
		t.Fatalf("verify on a failed domain: %+v", again)
	}
	secondRun := s.temporalC.GetWorkflow(ctx2, onboarding.WorkflowID(otherID), "")
	if secondRun.GetRunID() == firstRun.GetRunID() {
		t.Fatal("no new run for the new window")
	}
	if err := secondRun.Get(ctx2, &result); err != nil || result.Status != "verified" {
		t.Fatalf("new window run: %v %v", result, err)
	}
	secondHistory := s.historyJSON(onboarding.WorkflowID(otherID), secondRun.GetRunID())
	assertNoKeyMaterial(t, s, otherID, secondHistory)
	recordHistory(t, "../../workflows/onboarding/testdata/onboarding-v2-new-window.json", secondHistory)

	// A verified domain has no run; Verify checks directly and still answers.
	if direct := api.verify(id); direct.Domain.Status != "verified" {
		t.Fatalf("direct verify: %+v", direct)
	}
}

// assertNoKeyMaterial decrypts the domain's private keys from the database and
// checks that neither they, nor the public keys, nor any PEM appear in history.
func assertNoKeyMaterial(t *testing.T, s *stack, domainID int64, history []byte) {
	t.Helper()
	st := testenv.OpenStore(t, s.databaseURL)
	keysOf, err := st.CurrentDKIMKeys(context.Background(), domainID)
	if err != nil || len(keysOf) != 2 {
		t.Fatalf("keys of %d: %v %v", domainID, keysOf, err)
	}
	raw, _ := base64.StdEncoding.DecodeString(testEncryptionKey)
	box, err := secrets.New(raw)
	if err != nil {
		t.Fatal(err)
	}
	var needles []string
	for _, k := range keysOf {
		der, err := box.Open(k.PrivateKeyEnc, secrets.Binding("dkim_keys", k.Selector))
		if err != nil {
			t.Fatalf("decrypt %s: %v", k.Selector, err)
		}
		b64 := base64.StdEncoding.EncodeToString(der)
		needles = append(needles, b64[:64], b64[len(b64)/2:len(b64)/2+64], k.PublicKey[:64], base64.StdEncoding.EncodeToString(k.PrivateKeyEnc)[:40])
	}
	needles = append(needles, "PRIVATE KEY", "BEGIN ", "MIIEv", "MIIBIj", "v=DKIM1")
	if found := contains(history, needles...); found != "" {
		t.Fatalf("workflow history of domain %d contains key material %q", domainID, found)
	}
}

func queryTXT(t *testing.T, addr, name string) string {
	t.Helper()
	m := new(dns.Msg)
	m.SetQuestion(name, dns.TypeTXT)
	in, err := dns.Exchange(m, addr)
	if err != nil || in.Rcode != dns.RcodeSuccess || len(in.Answer) == 0 {
		return ""
	}
	if !in.Authoritative {
		t.Fatalf("answer for %s is not authoritative", name)
	}
	return strings.Join(in.Answer[0].(*dns.TXT).Txt, "")
}
