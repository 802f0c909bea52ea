package api_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-github/v74/github"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/mailyard/mailyard/internal/secrets"
	"github.com/mailyard/mailyard/internal/store"
	"github.com/mailyard/mailyard/internal/testenv"
)

// verifies reports which stock verifiers accept a delivery with a secret:
// go-github on X-Service-Signature, the Standard Webhooks library on
// webhook-*.
func verifies(t *testing.T, rec received, secret string) (github, standard bool) {
	t.Helper()
	_, gerr := githubValidate(rec, secret)
	v, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		t.Fatal(err)
	}
	return gerr == nil, v.Verify([]byte(rec.Body), rec.Header) == nil
}

func githubValidate(rec received, secret string) ([]byte, error) {
	return github.ValidatePayloadFromBody(rec.Header.Get("Content-Type"), strings.NewReader(rec.Body), rec.Header.Get("X-Service-Signature"), []byte(secret))
}

func TestSecretRotationWithOverlap(t *testing.T) {
	h := newHarness(t)
	rcv := newReceiver(t)
	h.startDeliveryWorker(rcv)
	id, s1 := h.createWebhook(h.adminKey, rcv.URL+"/rot", "delivered")
	rotate := fmt.Sprintf("/api/v1/webhooks/%d/secret/rotate", id)
	send := func() received {
		t.Helper()
		return rcv.waitForUnchecked(t, h.sendTest(id, nil))
	}
	expect := func(what string, rec received, secret string, wantGitHub, wantStandard bool) {
		t.Helper()
		gh, sw := verifies(t, rec, secret)
		if gh != wantGitHub || sw != wantStandard {
			t.Fatalf("%s: go-github %v (want %v), standard webhooks %v (want %v); webhook-signature %q",
				what, gh, wantGitHub, sw, wantStandard, rec.Header.Get("webhook-signature"))
		}
	}

	// Before: one secret, one signature.
	before := send()
	expect("before, old secret", before, s1, true, true)
	if n := len(strings.Fields(before.Header.Get("webhook-signature"))); n != 1 {
		t.Fatalf("%d signatures before rotating", n)
	}

	// During the overlap: both secrets verify the Standard Webhooks headers,
	// and X-Service-Signature stays with the oldest secret.
	d := h.do("POST", rotate, h.adminKey, map[string]any{"expire_previous_in_seconds": 3}).data(t, 200)
	s2 := d["signing_secret"].(string)
	expiresAt, err := time.Parse(time.RFC3339Nano, d["previous_secret_expires_at"].(string))
	if err != nil || s2 == s1 || !strings.HasPrefix(s2, "whsec_") || time.Until(expiresAt) > 4*time.Second || time.Until(expiresAt) < time.Second {
		t.Fatalf("rotate answered %v (%v)", d, err)
	}
	if got := h.do("GET", fmt.Sprintf("/api/v1/webhooks/%d/secret", id), h.adminKey, nil).data(t, 200)["signing_secret"]; got != s2 {
		t.Fatalf("secret shown after rotation %v", got)
	}
	during := send()
	expect("during, old secret", during, s1, true, true)
	expect("during, new secret", during, s2, false, true)
	sigs := strings.Fields(during.Header.Get("webhook-signature"))
	if len(sigs) != 2 {
		t.Fatalf("webhook-signature during the overlap: %q", sigs)
	}
	// Newest first.
	v2, _ := standardwebhooks.NewWebhook(s2)
	only := during.Header.Clone()
	only["webhook-signature"] = []string{sigs[0]}
	if v2.Verify([]byte(during.Body), only) != nil {
		t.Fatal("the first signature is not the new secret's")
	}
	// The previous secret is stored encrypted, bound to its row.
	var prev []store.PreviousSecret
	if err := h.store.DB.NewSelect().Model(&prev).Where("webhook_id = ?", id).Scan(t.Context()); err != nil || len(prev) != 1 ||
		strings.Contains(string(prev[0].SecretEnc), s1[6:]) || len(prev[0].SecretEnc) == 0 {
		t.Fatalf("previous secrets at rest %+v %v", prev, err)
	}

	// After expiry: the new secret only, on both headers; the old row is erased.
	time.Sleep(time.Until(expiresAt) + 100*time.Millisecond)
	after := send()
	expect("after, old secret", after, s1, false, false)
	expect("after, new secret", after, s2, true, true)
	if n, err := h.store.ErasePreviousSecrets(t.Context()); err != nil || n != 1 {
		t.Fatalf("erased %d expired secrets (%v)", n, err)
	}

	// Overlap again, then 0 ends every overlap at once.
	s3 := h.do("POST", rotate, h.adminKey, map[string]any{"expire_previous_in_seconds": 600}).data(t, 200)["signing_secret"].(string)
	rec := send()
	expect("long overlap, s2", rec, s2, true, true)
	expect("long overlap, s3", rec, s3, false, true)
	d = h.do("POST", rotate, h.adminKey, map[string]any{"expire_previous_in_seconds": 0}).data(t, 200)
	s4 := d["signing_secret"].(string)
	rec = send()
	expect("after 0, s2", rec, s2, false, false)
	expect("after 0, s3", rec, s3, false, false)
	expect("after 0, s4", rec, s4, true, true)
	if n, _ := h.store.DB.NewSelect().Model((*store.PreviousSecret)(nil)).Where("webhook_id = ?", id).Count(t.Context()); n != 0 {
		t.Fatalf("%d previous secrets kept after rotating with 0", n)
	}

	// At most 5 unexpired previous secrets; the default overlap is a day.
	for i := range 5 {
		d := h.do("POST", rotate, h.adminKey, nil).data(t, 200)
		exp, _ := time.Parse(time.RFC3339Nano, d["previous_secret_expires_at"].(string))
		if i == 0 && (time.Until(exp) < 23*time.Hour || time.Until(exp) > 25*time.Hour) {
			t.Fatalf("default expiry %v", exp)
		}
	}
	h.do("POST", rotate, h.adminKey, nil).expectError(t, 409, "too_many_secrets")
	rec = send()
	if n := len(strings.Fields(rec.Header.Get("webhook-signature"))); n != 6 {
		t.Fatalf("%d signatures with 5 previous secrets", n)
	}
	h.do("POST", rotate, h.adminKey, map[string]any{"expire_previous_in_seconds": 604801}).expectError(t, 422, "validation_failed")
	h.do("POST", rotate, h.adminKey, map[string]any{"expire_previous_in_seconds": -1}).expectError(t, 422, "validation_failed")
	_, otherKey := h.newOrg("other")
	h.do("POST", rotate, otherKey, nil).expectError(t, 404, "not_found")
}

// A secret that cannot be decrypted (MAILYARD_ENCRYPTION_KEY changed) cannot
// be shown (409, not 500) nor kept signing: a rotation that would keep it is refused with a 409
// saying how to rotate, and one with expire_previous_in_seconds 0 replaces
// it, after which deliveries are signed again.
func TestRotatingAnUnreadableSecret(t *testing.T) {
	h := newHarness(t)
	rcv := newReceiver(t)
	h.startDeliveryWorker(rcv)
	id, _ := h.createWebhook(h.adminKey, rcv.URL+"/unreadable", "delivered")
	other, _ := secrets.New(bytes.Repeat([]byte{7}, 32))
	sealed, _ := other.Seal([]byte("whsec_c2VhbGVkIGVsc2V3aGVyZQ=="), store.WebhookSecretBinding(id))
	if _, err := h.store.DB.NewUpdate().Model((*store.Webhook)(nil)).Set("secret_enc = ?", sealed).Where("id = ?", id).Exec(context.Background()); err != nil {
		t.Fatal(err)
	}
	shown := h.do("GET", fmt.Sprintf("/api/v1/webhooks/%d/secret", id), h.adminKey, nil)
	shown.expectError(t, 409, "conflict")
	if !strings.Contains(string(shown.Raw), "expire_previous_in_seconds 0") {
		t.Fatalf("409 without the way out: %s", shown.Raw)
	}
	rotate := fmt.Sprintf("/api/v1/webhooks/%d/secret/rotate", id)
	refused := h.do("POST", rotate, h.adminKey, map[string]any{})
	refused.expectError(t, 409, "conflict")
	if !strings.Contains(string(refused.Raw), "expire_previous_in_seconds 0") {
		t.Fatalf("409 without the way out: %s", refused.Raw)
	}
	s2 := h.do("POST", rotate, h.adminKey, map[string]any{"expire_previous_in_seconds": 0}).data(t, 200)["signing_secret"].(string)
	rec := rcv.waitForUnchecked(t, h.sendTest(id, nil))
	if gh, sw := verifies(t, rec, s2); !gh || !sw {
		t.Fatalf("after the rotation: go-github %v, standard webhooks %v", gh, sw)
	}
}

// waitForUnchecked waits for one request of a delivery and returns it,
// leaving signature checks to the caller.
func (r *receiver) waitForUnchecked(t *testing.T, deliveryID string) received {
	t.Helper()
	testenv.Eventually(t, 60*time.Second, "delivery "+deliveryID, func() bool { return len(r.requests(deliveryID)) > 0 })
	return r.requests(deliveryID)[0]
}
