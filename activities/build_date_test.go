package activities

import (
	"bufio"
	"bytes"
	"encoding/json"
	"net/mail"
	"net/textproto"
	"testing"
	"time"

	"github.com/mailyard/mailyard/internal/mailmsg"
	"github.com/mailyard/mailyard/internal/store"
)

// An email is dated when it was created, unless it was scheduled: one
// scheduled days ahead is dated at its scheduled time, not days before it
// arrives. Either way a message built again (a retried step, a tracked
// recipient's own message) has the same Date.
func TestBuiltMessageIsDatedAtItsScheduledTime(t *testing.T) {
	content, err := json.Marshal(mailmsg.Message{
		From: mail.Address{Address: "news@shop.example"}, To: []mail.Address{{Address: "ada@example.org"}},
		Subject: "Tomorrow", Text: "Hi.",
	})
	if err != nil {
		t.Fatal(err)
	}
	created := time.Date(2026, 11, 1, 9, 0, 0, 0, time.UTC)
	later := created.Add(30 * 24 * time.Hour)
	earlier := created.Add(-time.Minute) // never stored so, but not a reason to date it back
	d := &store.Domain{Domain: "shop.example"}
	for _, tc := range []struct {
		name      string
		scheduled *time.Time
		want      time.Time
	}{
		{"sent at once", nil, created},
		{"scheduled", &later, later},
		{"scheduled before its creation", &earlier, created},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := &store.Email{ID: "0193a0b1-0000-7000-8000-000000000001", Source: store.SourceAPI, Content: content,
				CreatedAt: created, ScheduledAt: tc.scheduled}
			for range 2 {
				raw, err := buildMessage(e, d)
				if err != nil {
					t.Fatal(err)
				}
				h, err := textproto.NewReader(bufio.NewReader(bytes.NewReader(raw))).ReadMIMEHeader()
				if err != nil {
					t.Fatal(err)
				}
				got, err := mail.ParseDate(h.Get("Date"))
				if err != nil || !got.Equal(tc.want) {
					t.Fatalf("Date %q (%v), want %s", h.Get("Date"), err, tc.want.Format(time.RFC1123Z))
				}
			}
		})
	}
}
