package webhook

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"io"
	"log"
	"math/big"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/go-github/v74/github"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
)

// TestHTTPSReceiverVerifiesSignatures delivers over verified TLS to a
// receiver that checks both signatures with independent implementations:
// go-github for X-Service-Signature (same format as X-Hub-Signature-256)
// and the Standard Webhooks library for the webhook-* headers.
func TestHTTPSReceiverVerifiesSignatures(t *testing.T) {
	verifier, err := standardwebhooks.NewWebhook(testSecret)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var failures []string
	var ids []string
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fail := func(msg string) {
			mu.Lock()
			failures = append(failures, msg)
			mu.Unlock()
			w.WriteHeader(http.StatusUnauthorized)
		}
		payload, err := github.ValidatePayloadFromBody(r.Header.Get("Content-Type"), r.Body, r.Header.Get("X-Service-Signature"), []byte(testSecret))
		if err != nil {
			fail("go-github: " + err.Error())
			return
		}
		if err := verifier.Verify(payload, r.Header); err != nil {
			fail("standard webhooks: " + err.Error())
			return
		}
		mu.Lock()
		ids = append(ids, r.Header.Get("webhook-id"))
		mu.Unlock()
		w.WriteHeader(http.StatusOK)
	}))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.StartTLS()
	t.Cleanup(srv.Close)

	pool := x509.NewCertPool()
	pool.AddCert(srv.Certificate())
	client := NewClient(Policy{AllowPrivateNetworks: true}, WithRootCAs(pool))

	// Two attempts of the same delivery: each is signed on its own and
	// both carry the same delivery id.
	d := testDelivery(srv.URL + "/hooks/mailyard")
	for attempt := range 2 {
		out := Send(context.Background(), client, d)
		if out.Verdict != Success || out.StatusCode != 200 {
			t.Fatalf("attempt %d: %+v, receiver said %v", attempt, out, failures)
		}
	}
	if len(failures) > 0 {
		t.Fatalf("signature checks failed: %v", failures)
	}
	if len(ids) != 2 || ids[0] != d.ID || ids[1] != d.ID {
		t.Fatalf("webhook-id per attempt %v, want %s twice", ids, d.ID)
	}

	// A tampered body must fail both checks, proving they check something.
	tampered := d
	tampered.Body = []byte(strings.Replace(string(d.Body), "Ada", "Eve", 1))
	mac := SignSeed(testSecret, d.Body)
	if _, err := github.ValidatePayloadFromBody("application/json", strings.NewReader(string(tampered.Body)), mac, []byte(testSecret)); err == nil {
		t.Error("go-github accepted a tampered body")
	}
	now := time.Now()
	sig, err := SignStandard(testSecret, d.ID, now, d.Body)
	if err != nil {
		t.Fatal(err)
	}
	headers := http.Header{}
	headers.Set("webhook-id", d.ID)
	headers.Set("webhook-timestamp", strconv.FormatInt(now.Unix(), 10))
	headers.Set("webhook-signature", sig)
	if err := verifier.Verify(d.Body, headers); err != nil {
		t.Errorf("standard webhooks rejected the original body: %v", err)
	}
	if err := verifier.Verify(tampered.Body, headers); err == nil {
		t.Error("standard webhooks accepted a tampered body")
	}
}

// TestHTTPSUntrustedCertificate: TLS is verified, so a receiver whose
// certificate does not chain to a trusted root is never sent the event.
func TestHTTPSUntrustedCertificate(t *testing.T) {
	rcv := &receiver{}
	rcv.Server = httptest.NewUnstartedServer(rcv.wrap(nil))
	rcv.Config.ErrorLog = log.New(io.Discard, "", 0)
	rcv.StartTLS()
	t.Cleanup(rcv.Close)

	out := Send(context.Background(), NewClient(Policy{AllowPrivateNetworks: true}), testDelivery(rcv.URL))
	if out.Verdict != Retryable || out.StatusCode != 0 || !strings.Contains(out.Error, "certificate") {
		t.Fatalf("outcome %+v", out)
	}
	if n := rcv.requests.Load(); n != 0 {
		t.Fatalf("receiver saw %d requests over an unverified connection", n)
	}
}

// TestHTTPSHostileCertificateNames: the attempt's error quotes the names of
// the receiver's certificate. A NUL among them would make the attempt
// unstorable (PostgreSQL refuses it in text), and many long names would
// bloat the delivery log; the text is cleaned and cut.
func TestHTTPSHostileCertificateNames(t *testing.T) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	names := []string{"nul\x00.example"}
	for i := range 10 {
		names = append(names, strings.Repeat("x", 60)+strconv.Itoa(i)+".example")
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), DNSNames: names,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	rcv := &receiver{}
	rcv.Server = httptest.NewUnstartedServer(rcv.wrap(nil))
	rcv.Config.ErrorLog = log.New(io.Discard, "", 0)
	rcv.TLS = &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key, Leaf: cert}}}
	rcv.StartTLS()
	t.Cleanup(rcv.Close)

	pool := x509.NewCertPool()
	pool.AddCert(cert)
	client := NewClient(Policy{AllowPrivateNetworks: true}, WithRootCAs(pool))
	url := strings.Replace(rcv.URL, "127.0.0.1", "localhost", 1)
	out := Send(context.Background(), client, testDelivery(url))
	if out.Verdict != Retryable || out.StatusCode != 0 || !strings.Contains(out.Error, "nul\uFFFD.example") {
		t.Fatalf("outcome %+v", out)
	}
	if !utf8.ValidString(out.Error) || strings.ContainsRune(out.Error, 0) || len(out.Error) > 512 {
		t.Fatalf("error text %q (%d bytes) is not storable", out.Error, len(out.Error))
	}
	if n := rcv.requests.Load(); n != 0 {
		t.Fatalf("receiver saw %d requests over an unverified connection", n)
	}
}
