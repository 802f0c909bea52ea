package api

import (
	"bytes"
	"encoding/base64"
	"errors"
	"net/http"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/google/uuid"
	"golang.org/x/net/http/httpguts"

	"github.com/mailyard/mailyard/internal/store"
)

// FuzzPageCursor checks cursor handling from both sides.
//   - Any cursor string a client sends is either refused with the documented
//     422 validation error on query.cursor, or decodes to a key of the list's
//     type with paging on (a page size from 1 up); a decoded key re-encoded
//     as a cursor of the same list decodes to the same key. With the UUID
//     lists' key check, a decoded key is a canonical UUID.
//   - Any key a page ends with (an id, or a UUID-like string) makes a
//     next_cursor that decodes back to that key for its own list and is
//     refused by every other list.
func FuzzPageCursor(f *testing.F) {
	cur := func(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }
	for _, c := range []string{
		"", cur(`{"v":1,"l":"domains","a":42}`), cur(`{"v":1,"l":"webhooks","a":42}`), cur(`{"v":2,"l":"domains","a":42}`),
		cur(`{"v":1,"l":"domains","a":"42"}`), cur(`{"v":1,"l":"domains","a":1e400}`), cur(`{"v":1,"l":"domains","a":-9223372036854775809}`),
		cur(`{"v":1,"l":"domains","a":null}`), cur(`{"v":1,"l":"domains"}`), cur(`{"v":1,"l":"domains","a":1,"a":2}`), cur(`[]`), cur(`null`),
		cur(`{"v":1,"l":"domains","a":1.5}`), cur("\x00\xff"), "eyJ2IjoxfQ==", "!!!", "a", strings.Repeat("A", 4096),
		cur(`{"v":1,"l":"deliveries","a":"0b6f0f4e-5c1a-4f8e-9b1e-2d3c4b5a6f70"}`),
	} {
		f.Add(c, 0, "domains", int64(42), "0b6f0f4e-5c1a-4f8e-9b1e-2d3c4b5a6f70")
		f.Add(c, 50, "deliveries", int64(-1), "\xff")
	}
	f.Fuzz(func(t *testing.T, cursorText string, limit int, list string, id int64, uuid string) {
		if limit < 0 || limit > 100 {
			limit = 0 // the API's schema refuses these before storePage runs
		}
		if !utf8.ValidString(list) {
			list = "domains" // list names are constants of the code
		}
		q := PageQuery{Limit: limit, Cursor: cursorText}
		p, err := storePage[int64](q, list, 0, nil)
		checkPage(t, q, p, err, list, func(after any) string {
			return nextCursorFor(t, list, after.(int64))
		})
		ps, err := storePage[string](q, list, 0, nil)
		checkPage(t, q, ps, err, list, func(after any) string {
			return nextCursorFor(t, list, after.(string))
		})
		// With the UUID lists' key check, a key that reaches SQL is a
		// canonical UUID (PostgreSQL's uuid type refuses other forms).
		if pu, err := storePage[string](q, list, 0, canonicalUUID); err == nil && pu.After != nil {
			if key, ok := pu.After.(string); !ok || !canonicalForm(key) {
				t.Fatalf("cursor %q gave the key %#v", cursorText, pu.After)
			}
		}

		// Keys a page can end with make cursors that come back intact.
		checkRoundTrip(t, list, id)
		if utf8.ValidString(uuid) {
			checkRoundTrip(t, list, uuid)
		}
	})
}

// checkPage checks the answer of storePage to q. reencode makes the next
// cursor of a decoded key.
func checkPage(t *testing.T, q PageQuery, p store.Page, err error, list string, reencode func(any) string) {
	t.Helper()
	if err != nil {
		var e *ErrorResponse
		if !errors.As(err, &e) || e.GetStatus() != http.StatusUnprocessableEntity || e.Err.Code != CodeValidationFailed ||
			len(e.Err.Details) != 1 || e.Err.Details[0].Location != "query.cursor" {
			t.Fatalf("cursor %q refused with %v; want a 422 validation error on query.cursor", q.Cursor, err)
		}
		return
	}
	if q.Cursor == "" {
		if p.After != nil || p.Limit != q.Limit {
			t.Fatalf("no cursor gave page %+v; want limit %d and no key", p, q.Limit)
		}
		return
	}
	if p.After == nil || p.Limit < 1 {
		t.Fatalf("cursor %q accepted as page %+v; want a key and a page size", q.Cursor, p)
	}
	next := reencode(p.After)
	var again store.Page
	switch p.After.(type) {
	case int64:
		again, err = storePage[int64](PageQuery{Cursor: next}, list, 0, nil)
	case string:
		again, err = storePage[string](PageQuery{Cursor: next}, list, 0, nil)
	}
	if err != nil || again.After != p.After {
		t.Fatalf("cursor %q decoded to %v, re-encoded as %q, which decodes to %v, %v", q.Cursor, p.After, next, again.After, err)
	}
}

// nextCursorFor is the next_cursor of a page of list whose last key is key.
func nextCursorFor[K cursorKey](t *testing.T, list string, key K) string {
	t.Helper()
	info, err := pageInfo(store.Page{Limit: 1}, list, []K{key}, true, func(k *K) K { return *k })
	if err != nil {
		t.Fatalf("pageInfo(%q, %v): %v", list, key, err)
	}
	if info.NextCursor.next == "" || info.HasMore == nil || !*info.HasMore {
		t.Fatalf("pageInfo(%q, %v) = %+v; want a next cursor", list, key, info)
	}
	return info.NextCursor.next
}

func checkRoundTrip[K cursorKey](t *testing.T, list string, key K) {
	t.Helper()
	next := nextCursorFor(t, list, key)
	p, err := storePage[K](PageQuery{Cursor: next}, list, 0, nil)
	if err != nil || p.After != any(key) || p.Limit != defaultPageSize {
		t.Fatalf("next_cursor of key %v in %q gave page %+v, %v; want the key back", key, list, p, err)
	}
	if _, err := storePage[K](PageQuery{Cursor: next}, list+"x", 0, nil); err == nil {
		t.Fatalf("next_cursor of list %q accepted by list %q", list, list+"x")
	}
}

// FuzzIdempotencyKey checks the Idempotency-Key rule: an accepted key is 1 to
// 255 printable ASCII characters, and so a legal HTTP header value; a
// non-empty key of at most 255 bytes is refused only for a byte outside
// printable ASCII. The encryption binding of a stored answer is different
// for every (organization, key) pair, so one answer never opens under
// another key.
func FuzzIdempotencyKey(f *testing.F) {
	for _, k := range []string{
		"order-1234", "0b6f0f4e-5c1a-4f8e-9b1e-2d3c4b5a6f70", "", " ", "a b", "~!@#$%^&*()", "\x00", "a\nb", "a\r\nX-Evil: 1",
		"\x7f", "é", "\xff", strings.Repeat("k", 255), strings.Repeat("k", 256), "1/2", "/",
	} {
		f.Add(k, int64(1), "1/"+k, int64(11))
	}
	f.Fuzz(func(t *testing.T, key string, org int64, otherKey string, otherOrg int64) {
		ok := validIdempotencyKey(key)
		printable := true
		for i := 0; i < len(key); i++ {
			printable = printable && key[i] >= 0x20 && key[i] <= 0x7e
		}
		if ok {
			if len(key) < 1 || len(key) > idempotencyMaxKeyLength || !printable {
				t.Fatalf("validIdempotencyKey accepted %q", key)
			}
			if !httpguts.ValidHeaderFieldValue(key) || !utf8.ValidString(key) {
				t.Fatalf("validIdempotencyKey accepted %q, which is no legal header value", key)
			}
		} else if key != "" && len(key) <= idempotencyMaxKeyLength && printable {
			t.Fatalf("validIdempotencyKey refused %q", key)
		}

		a := store.IdempotencyBinding(org, key)
		b := store.IdempotencyBinding(otherOrg, otherKey)
		same := org == otherOrg && key == otherKey
		if bytes.Equal(a, b) != same {
			t.Fatalf("bindings of (%d, %q) and (%d, %q): equal = %v", org, key, otherOrg, otherKey, !same)
		}
	})
}

// canonicalForm reports whether s is a UUID as uuid.UUID.String writes it.
func canonicalForm(s string) bool {
	id, err := uuid.Parse(s)
	return err == nil && id.String() == s
}
