package webhook

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// FuzzBuildBody feeds the ingest API's fields (and a raw JSON data object, as
// platform events pass) through the body builder. Invariant: a body is either
// refused with an error (only for an empty event type or a UTC year outside
// 0001..9999: RFC 3339 cannot write the years after, and PostgreSQL has no
// year 0) or is one line of valid JSON with exactly the
// documented top-level fields in order, the timestamp in RFC 3339 UTC, and
// the caller's strings back unchanged when they are valid UTF-8; building
// twice gives the same bytes (retries send and sign the same body).
func FuzzBuildBody(f *testing.F) {
	ts := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC).Unix()
	f.Add("delivered", ts, "msg-1", "to@example.com", "Hello <b>&</b>", `{"domain":"example.com"}`)
	f.Add("", ts, "", "", "", `{}`)
	f.Add("bounced", int64(-62135596800), "\x00", "\xff\xfe", "\u2028\u2029\"\\", `[]`)
	f.Add("x\n\"y", int64(253402300799), "a", "b", strings.Repeat("é", 1000), `null`)
	f.Add("domain.verified", ts, "m", "t", "s", `{"a":{"b":[1,2,{"c":null}]}}`)
	f.Add("domain.verified", ts, "m", "t", "s", `"string"`)
	f.Fuzz(func(t *testing.T, eventType string, unix int64, messageID, toEmail, subject, rawData string) {
		at := time.Unix(unix, 0)
		body, err := BuildBody(eventType, at, messageID, toEmail, subject)
		if err == nil {
			var got struct {
				EventType string `json:"event_type"`
				Timestamp string `json:"timestamp"`
				Data      struct {
					MessageID string `json:"message_id"`
					ToEmail   string `json:"to_email"`
					Subject   string `json:"subject"`
				} `json:"data"`
			}
			checkBody(t, body, &got)
			if _, err := time.Parse(time.RFC3339, got.Timestamp); err != nil || !strings.HasSuffix(got.Timestamp, "Z") {
				t.Fatalf("timestamp %q is not RFC 3339 UTC: %v", got.Timestamp, err)
			}
			for _, pair := range [][2]string{{eventType, got.EventType}, {messageID, got.Data.MessageID}, {toEmail, got.Data.ToEmail}, {subject, got.Data.Subject}} {
				if utf8.ValidString(pair[0]) && pair[0] != pair[1] {
					t.Fatalf("body %s holds %q where %q was given", body, pair[1], pair[0])
				}
			}
			if again, _ := BuildBody(eventType, at, messageID, toEmail, subject); !bytes.Equal(again, body) {
				t.Fatalf("BuildBody is not deterministic: %s then %s", body, again)
			}
		} else if eventType != "" {
			// Years after 9999 cannot be written as RFC 3339; year 0
			// cannot be stored in PostgreSQL.
			if y := at.UTC().Year(); y >= 1 && y <= 9999 {
				t.Fatalf("BuildBody(%q, %s, ...) refused: %v", eventType, at, err)
			}
		}

		if !json.Valid([]byte(rawData)) {
			return
		}
		body, err = BuildEnvelope(eventType, at, json.RawMessage(rawData))
		if err != nil {
			return
		}
		var env struct {
			Data map[string]json.RawMessage `json:"data"`
		}
		checkBody(t, body, &env)
		if env.Data == nil {
			t.Fatalf("BuildEnvelope accepted data %s that is not a JSON object: %s", rawData, body)
		}
	})
}

// checkBody fails unless body is one line of valid JSON whose top-level
// fields are exactly event_type, timestamp and data, in that order, and
// decodes it into v.
func checkBody(t *testing.T, body []byte, v any) {
	t.Helper()
	if !json.Valid(body) || bytes.ContainsAny(body, "\r\n") {
		t.Fatalf("body is not one line of valid JSON: %q", body)
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	var keys []string
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		t.Fatalf("body %s is not an object", body)
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, tok.(string))
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			t.Fatal(err)
		}
	}
	if strings.Join(keys, ",") != "event_type,timestamp,data" {
		t.Fatalf("body %s has fields %v; want event_type, timestamp, data", body, keys)
	}
	if err := json.Unmarshal(body, v); err != nil {
		t.Fatalf("body %s: %v", body, err)
	}
}
