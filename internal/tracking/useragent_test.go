package tracking

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"github.com/google/uuid"

	"github.com/mailyard/mailyard/internal/keyauth"
	"github.com/mailyard/mailyard/internal/keys"
	"github.com/mailyard/mailyard/internal/store"
	"github.com/mailyard/mailyard/internal/testenv"
	"github.com/mailyard/mailyard/internal/tracktoken"
)

func TestCleanUserAgent(t *testing.T) {
	for in, want := range map[string]string{
		"Mozilla/5.0 (X11)":           "Mozilla/5.0 (X11)",
		" a\x00b\tc\r\n\u200b\ufffd ": "abc\u200b",
		"bad\xffutf8":                 "badutf8",
	} {
		if got := cleanUserAgent(in); got != want {
			t.Errorf("cleanUserAgent(%q) = %q, want %q", in, got, want)
		}
	}
	// A long one is cut at maxUserAgent bytes, and a rune the cut splits
	// is dropped.
	split := strings.Repeat("a", maxUserAgent-1) + "é" + strings.Repeat("b", 1000)
	if got := cleanUserAgent(split); got != strings.Repeat("a", maxUserAgent-1) {
		t.Fatalf("cut to %d bytes: %q…", len(got), got[len(got)-3:])
	}
	// What is kept is a copy, not a slice of the header: the routes queue it.
	long := strings.Repeat("a", 60<<10)
	got := cleanUserAgent(long)
	if len(got) != maxUserAgent {
		t.Fatalf("cut to %d bytes", len(got))
	}
	start := uintptr(unsafe.Pointer(unsafe.StringData(long)))
	if p := uintptr(unsafe.Pointer(unsafe.StringData(got))); p >= start && p < start+uintptr(len(long)) {
		t.Fatal("the cut user agent shares the header's memory")
	}
}

// The events the open and click routes queue hold at most maxUserAgent
// bytes of the user agent, not the header (up to 64 KiB): a flood of
// requests with huge user agents must not pin n × 64 KiB in the queue.
// (The old routes queued r.UserAgent() itself: the test measured some
// 12 MB here.)
func TestQueuedEventsHoldACutUserAgent(t *testing.T) {
	ctx := context.Background()
	st := testenv.OpenStore(t, testenv.SQLiteURL(t))
	secret, _ := keys.NewAPIKey()
	org, err := st.CreateOrganizationWithKey(ctx, "acme", keyauth.WithSecret(secret, &store.APIKey{Label: "boot", Username: "acme", Permissions: store.Permissions{"admin"}}))
	if err != nil {
		t.Fatal(err)
	}
	d := &store.Domain{OrganizationID: org.ID, Domain: "shop.example", MailFromSubdomain: "mail.shop.example", DKIMToken: "tok", Status: store.DomainVerified}
	if err := st.CreateDomain(ctx, d, nil); err != nil {
		t.Fatal(err)
	}
	e := &store.Email{ID: uuid.NewString(), OrganizationID: org.ID, DomainID: d.ID, FromAddress: "hello@shop.example",
		Subject: "Sale", Source: store.SourceAPI, TrackOpens: true, TrackClicks: true}
	if err := st.CreateEmail(ctx, e, []string{"ada@x.example"}); err != nil {
		t.Fatal(err)
	}
	if err := st.SaveEmailLinks(ctx, e.ID, []string{"https://shop.example/a"}); err != nil {
		t.Fatal(err)
	}
	k, err := tracktoken.New(bytes.Repeat([]byte{7}, 32))
	if err != nil {
		t.Fatal(err)
	}
	id := uuid.MustParse(e.ID)

	// Opens and clicks of one token are recorded once a minute: each
	// request is for a recipient of its own.
	for _, route := range []struct {
		name string
		path func(i int) string
	}{
		{"open", func(i int) string {
			return OpenPath + k.MustMint(tracktoken.Token{Kind: tracktoken.Open, EmailID: id, Recipient: i}) + pixelSuffix
		}},
		{"click", func(i int) string {
			return ClickPath + k.MustMint(tracktoken.Token{Kind: tracktoken.Click, EmailID: id, Recipient: i})
		}},
	} {
		t.Run(route.name, func(t *testing.T) {
			const n = 200
			// Nothing works the queue: every event stays in it.
			q := NewQueue(n, slog.New(slog.DiscardHandler))
			mux := http.NewServeMux()
			(&Routes{Keys: k, Store: st, Queue: q, Recorder: &Recorder{Store: st}, Hosts: []string{"example.com"},
				Logger: slog.New(slog.DiscardHandler)}).Register(mux)

			before := heapInUse()
			for i := range n {
				r := httptest.NewRequest("GET", route.path(i), nil)
				// A header of its own for each request, as a server reads it.
				r.Header.Set("User-Agent", strings.Repeat("x", 60<<10)+strconv.Itoa(i))
				w := httptest.NewRecorder()
				mux.ServeHTTP(w, r)
				if w.Code != http.StatusOK && w.Code != http.StatusFound {
					t.Fatalf("status %d", w.Code)
				}
			}
			if len(q.jobs) != n {
				t.Fatalf("%d events queued, want %d", len(q.jobs), n)
			}
			grown := heapInUse() - before
			// Each event: its closure and at most maxUserAgent bytes; allow 4 KiB.
			if grown > n*4<<10 {
				t.Fatalf("the queue of %d events holds %d KiB", n, grown>>10)
			}
			runtime.KeepAlive(q)
		})
	}
}

// heapInUse is the bytes of live heap objects after a collection.
func heapInUse() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}
