package webhook

import (
	"bytes"
	"encoding/json"
	"errors"
	"time"
)

// eventBody is the delivery body. Its field order is the documented one;
// new fields may only be added inside data.
type eventBody struct {
	EventType string `json:"event_type"`
	Timestamp string `json:"timestamp"`
	Data      any    `json:"data"`
}

// EmailEventData is the data of an email event (docs/webhooks.md, "The
// event catalogue"): opened adds the user agent, clicked the URL too.
type EmailEventData struct {
	MessageID string `json:"message_id"`
	ToEmail   string `json:"to_email"`
	Subject   string `json:"subject"`
	URL       string `json:"url,omitempty"`
	UserAgent string `json:"user_agent,omitempty"`
}

// ErrTimestampOutOfRange refuses an event time whose UTC year RFC 3339 cannot
// write, or PostgreSQL store (before 0001 or after 9999).
var ErrTimestampOutOfRange = errors.New("the timestamp must fall between the years 0001 and 9999 in UTC")

// BuildBody returns the JSON body of an email event's delivery, with the
// timestamp in RFC 3339 UTC ("2026-11-21T10:00:00Z"). The bytes are built
// once per delivery and stored, so every retry sends and signs the same bytes.
func BuildBody(eventType string, ts time.Time, messageID, toEmail, subject string) ([]byte, error) {
	return BuildEnvelope(eventType, ts, EmailEventData{MessageID: messageID, ToEmail: toEmail, Subject: subject})
}

// BuildEnvelope returns a delivery body with any data object: the one
// envelope of email and platform events alike. data must marshal to a JSON
// object.
func BuildEnvelope(eventType string, ts time.Time, data any) ([]byte, error) {
	if eventType == "" {
		return nil, errors.New("event type is required")
	}
	// RFC 3339 has four-digit years; a time near year 10000 with an offset
	// can still land outside them in UTC. Year 0 is one too, but PostgreSQL
	// has none (1 BC comes before 1 AD): its event could not be stored.
	if y := ts.UTC().Year(); y < 1 || y > 9999 {
		return nil, ErrTimestampOutOfRange
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	// Subjects often contain <, > or &; keeping them literal makes the body
	// easier to read in receivers' logs and is still valid JSON.
	enc.SetEscapeHTML(false)
	if err := enc.Encode(eventBody{EventType: eventType, Timestamp: ts.UTC().Format(time.RFC3339), Data: data}); err != nil {
		return nil, err
	}
	out := bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
	// The data must be an object: receivers read fields from it.
	var probe struct {
		Data map[string]json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(out, &probe); err != nil || probe.Data == nil {
		return nil, errors.New("event data must be a JSON object")
	}
	return out, nil
}
