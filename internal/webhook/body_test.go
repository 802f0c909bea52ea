package webhook

import (
	"testing"
	"time"
)

func TestBuildBody(t *testing.T) {
	ts := time.Date(2026, 11, 21, 11, 0, 0, 123, time.FixedZone("CET", 3600))
	got, err := BuildBody("delivered", ts, "0b8f5c1e-3f7a-4c1e-9d55-6a0f8f7d2b11", "ada@example.com", `Hi "Ada" <&>`)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"event_type":"delivered","timestamp":"2026-11-21T10:00:00Z","data":{"message_id":"0b8f5c1e-3f7a-4c1e-9d55-6a0f8f7d2b11","to_email":"ada@example.com","subject":"Hi \"Ada\" <&>"}}`
	if string(got) != want {
		t.Fatalf("BuildBody =\n%s\nwant\n%s", got, want)
	}
	if _, err := BuildBody("", ts, "m", "t", "s"); err == nil {
		t.Error("BuildBody accepted an empty event type")
	}
}

func TestBuildEnvelope(t *testing.T) {
	ts := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
	got, err := BuildEnvelope("webhook.disabled", ts, map[string]any{"webhook_id": 7, "reason": "failing"})
	if err != nil {
		t.Fatal(err)
	}
	want := `{"event_type":"webhook.disabled","timestamp":"2026-11-21T10:00:00Z","data":{"reason":"failing","webhook_id":7}}`
	if string(got) != want {
		t.Fatalf("BuildEnvelope =\n%s\nwant\n%s", got, want)
	}
	for _, bad := range []any{nil, 3, []int{1}} {
		if _, err := BuildEnvelope("webhook.disabled", ts, bad); err == nil {
			t.Errorf("data %v accepted", bad)
		}
	}
}
