package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/mailyard/mailyard/internal/store"
)

// The recipients may be in to, cc or bcc alone: 1 to 50 in all
// (docs/sending.md). An email to bcc only was refused at body.to, which the
// schema had made required.
func TestSendToBccOnly(t *testing.T) {
	h := newHarness(t)
	domainID := h.domainInStatus(h.orgID, "quiet.example", store.DomainVerified)
	_, sendKey := h.issueCredential(h.adminKey, domainID, "sender", "send")

	body := map[string]any{"from": "news@quiet.example", "bcc": "ada@example.org", "subject": "hi", "text": "hello"}
	sent := h.do("POST", "/api/v1/emails", sendKey, body).data(t, 202)
	id := sent["email"].(map[string]any)["id"].(string)
	email := h.do("GET", "/api/v1/emails/"+id, sendKey, nil).data(t, 200)["email"].(map[string]any)
	if rs := email["recipients"].([]any); len(rs) != 1 || rs[0].(map[string]any)["email"] != "ada@example.org" {
		t.Fatalf("recipients %v", email["recipients"])
	}

	// null is a field left out: before, it was one empty address (422).
	body["to"], body["cc"], body["reply_to"] = nil, nil, nil
	h.do("POST", "/api/v1/emails", sendKey, body).data(t, 202)

	// An overlong entry is named, beside the request's other problems:
	// before, the schema refused the whole field and hid the rest.
	long := map[string]any{"from": "not an address", "to": []string{"b@x.example", strings.Repeat("n", 985) + " <c@x.example>"}, "subject": "hi", "text": "hello"}
	if got := h.do("POST", "/api/v1/emails", sendKey, long).detailLocations(); !slices.Equal(got, []string{"body.from", "body.to[1]"}) {
		t.Fatalf("an overlong entry and a bad sender: details at %v", got)
	}

	delete(body, "bcc")
	res := h.do("POST", "/api/v1/emails", sendKey, body)
	res.expectError(t, 422, "validation_failed")
	if got := res.detailLocations(); len(got) != 1 || got[0] != "body.to" {
		t.Fatalf("no recipient at all: details at %v", got)
	}
}

// A key's sending domain bounds the emails it sees unless it has admin,
// which manages the whole organization whatever its domain, as for the
// statistics (docs/credentials.md). Before, an admin credential, always
// scoped to a domain, saw only that domain's emails.
func TestAdminKeySeesEveryDomainsEmails(t *testing.T) {
	h := newHarness(t)
	shop := h.domainInStatus(h.orgID, "shop.example", store.DomainVerified)
	news := h.domainInStatus(h.orgID, "news.example", store.DomainVerified)
	_, sendKey := h.issueCredential(h.adminKey, news, "sender", "send")
	_, shopAdmin := h.issueCredential(h.adminKey, shop, "operator", "admin")
	_, shopSender := h.issueCredential(h.adminKey, shop, "shop sender", "send")

	body := map[string]any{"from": "hello@news.example", "to": "ada@example.org", "subject": "hi", "text": "hello"}
	id := h.do("POST", "/api/v1/emails", sendKey, body).data(t, 202)["email"].(map[string]any)["id"].(string)
	h.do("GET", "/api/v1/emails/"+id, shopAdmin, nil).data(t, 200)
	if list := h.do("GET", "/api/v1/emails", shopAdmin, nil).data(t, 200)["emails"].([]any); len(list) != 1 {
		t.Fatalf("the admin key lists %d emails, want 1", len(list))
	}
	h.do("GET", "/api/v1/emails/"+id, shopSender, nil).expectError(t, 404, "not_found")
}

// A cursor of one email's events is refused for another email's, as any
// cursor of another list is (docs/api-conventions.md): it skipped that
// email's events up to the cursor's.
func TestEmailEventsCursorNamesItsEmail(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	domainID := h.domainInStatus(h.orgID, "events.example", store.DomainVerified)
	_, sendKey := h.issueCredential(h.adminKey, domainID, "sender", "send")
	var ids []string
	for range 2 {
		body := map[string]any{"from": "hi@events.example", "to": "ada@example.org", "subject": "hi", "text": "hello"}
		ids = append(ids, h.do("POST", "/api/v1/emails", sendKey, body).data(t, 202)["email"].(map[string]any)["id"].(string))
	}
	owners := []store.DomainOwner{{OrganizationID: h.orgID, DomainID: domainID}}
	for i, eventType := range []string{"delivered", "opened"} {
		ev := &store.Event{EventID: fmt.Sprintf("ev-%d", i), Domain: "events.example", EventType: eventType, OccurredAt: time.Now().UTC(),
			MessageID: ids[0], ToEmail: "ada@example.org", Subject: "hi"}
		if _, _, err := h.store.IngestEvent(ctx, ev, owners, []byte(`{}`), func() (string, error) { return uuid.NewString(), nil }); err != nil {
			t.Fatal(err)
		}
	}
	page := h.do("GET", "/api/v1/emails/"+ids[0]+"/events?limit=1", sendKey, nil).data(t, 200)
	cursor, _ := page["next_cursor"].(string)
	if cursor == "" {
		t.Fatalf("no cursor after the first of two events: %v", page)
	}
	h.do("GET", "/api/v1/emails/"+ids[0]+"/events?limit=1&cursor="+cursor, sendKey, nil).data(t, 200)
	h.do("GET", "/api/v1/emails/"+ids[1]+"/events?limit=1&cursor="+cursor, sendKey, nil).expectError(t, 422, "validation_failed")
}

// slowReader gives its bytes in ten pieces spread over d.
type slowReader struct {
	rest  []byte
	piece int
	pause time.Duration
}

func newSlowReader(b []byte, d time.Duration) *slowReader {
	return &slowReader{rest: b, piece: len(b)/10 + 1, pause: d / 10}
}

func (r *slowReader) Read(p []byte) (int, error) {
	if len(r.rest) == 0 {
		return 0, io.EOF
	}
	time.Sleep(r.pause)
	n := copy(p, r.rest[:min(len(r.rest), r.piece)])
	r.rest = r.rest[n:]
	return n, nil
}

// A send whose body takes longer than 5 s to arrive (a large body on a
// slow link) is read to its end, with and without an Idempotency-Key:
// before, Huma's default body timeout of 5 s answered it 400 or 408.
func TestSlowBodyIsRead(t *testing.T) {
	h := newHarness(t)
	domainID := h.domainInStatus(h.orgID, "slow.example", store.DomainVerified)
	_, sendKey := h.issueCredential(h.adminKey, domainID, "sender", "send")
	body, err := json.Marshal(map[string]any{"from": "news@slow.example", "to": "ada@example.org", "subject": "hi",
		"text": strings.Repeat("slow ", 20000)})
	if err != nil {
		t.Fatal(err)
	}
	for name, header := range map[string]map[string]string{"no key": nil, "idempotency key": {"Idempotency-Key": uuid.NewString()}} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			res := h.doAt(h.srv.URL, "POST", "/api/v1/emails", sendKey, newSlowReader(body, 6500*time.Millisecond), header)
			if res.Status != 202 {
				t.Fatalf("status %d: %s", res.Status, res.Raw)
			}
		})
	}
}
