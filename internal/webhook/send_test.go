package webhook

import (
	"bytes"
	"compress/gzip"
	"context"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"
)

func TestSendOutcomes(t *testing.T) {
	retryDate := time.Now().Add(2 * time.Minute).UTC().Format(http.TimeFormat)
	cases := []struct {
		name       string
		status     int
		header     map[string]string
		verdict    Verdict
		retryAfter time.Duration // exact unless approx is set
		approx     bool
	}{
		{name: "200", status: 200, verdict: Success},
		{name: "204", status: 204, verdict: Success},
		{name: "410", status: 410, verdict: Gone},
		{name: "404", status: 404, verdict: Retryable},
		{name: "500", status: 500, verdict: Retryable},
		{name: "500 ignores Retry-After", status: 500, header: map[string]string{"Retry-After": "7"}, verdict: Retryable},
		{name: "429 seconds", status: 429, header: map[string]string{"Retry-After": "7"}, verdict: Retryable, retryAfter: 7 * time.Second},
		{name: "429 date", status: 429, header: map[string]string{"Retry-After": retryDate}, verdict: Retryable, retryAfter: 2 * time.Minute, approx: true},
		{name: "429 date in the past", status: 429, header: map[string]string{"Retry-After": "Wed, 21 Oct 2015 07:28:00 GMT"}, verdict: Retryable},
		{name: "429 garbage", status: 429, header: map[string]string{"Retry-After": "soon"}, verdict: Retryable},
		{name: "503 seconds", status: 503, header: map[string]string{"Retry-After": "30"}, verdict: Retryable, retryAfter: 30 * time.Second},
		{name: "503 without Retry-After", status: 503, verdict: Retryable},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rcv := startReceiver(t, func(w http.ResponseWriter, r *http.Request) {
				for k, v := range c.header {
					w.Header().Set(k, v)
				}
				w.WriteHeader(c.status)
				w.Write([]byte("answer"))
			})
			out := Send(context.Background(), loopbackClient(), testDelivery(rcv.URL))
			if out.Verdict != c.verdict || out.StatusCode != c.status || out.Error != "" {
				t.Fatalf("outcome %+v, want %v %d", out, c.verdict, c.status)
			}
			if c.status != 204 && string(out.ResponseBody) != "answer" {
				t.Errorf("response body %q", out.ResponseBody)
			}
			if c.approx {
				if d := out.RetryAfter - c.retryAfter; d < -5*time.Second || d > time.Second {
					t.Errorf("RetryAfter %v, want about %v", out.RetryAfter, c.retryAfter)
				}
			} else if out.RetryAfter != c.retryAfter {
				t.Errorf("RetryAfter %v, want %v", out.RetryAfter, c.retryAfter)
			}
			if out.Duration <= 0 {
				t.Errorf("Duration %v", out.Duration)
			}
		})
	}
}

func TestSendDoesNotFollowRedirects(t *testing.T) {
	target := startReceiver(t, nil)
	rcv := startReceiver(t, func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, target.URL+"/elsewhere", http.StatusFound)
	})
	out := Send(context.Background(), loopbackClient(), testDelivery(rcv.URL))
	if out.Verdict != Retryable || out.StatusCode != http.StatusFound {
		t.Fatalf("outcome %+v, want a retryable 302", out)
	}
	if n := target.requests.Load(); n != 0 {
		t.Fatalf("redirect target saw %d requests", n)
	}
}

func TestSendSendsDocumentedRequest(t *testing.T) {
	var got *http.Request
	var gotBody []byte
	rcv := startReceiver(t, func(w http.ResponseWriter, r *http.Request) {
		got = r
		gotBody = readAll(t, r)
	})
	d := testDelivery(rcv.URL + "/hook?x=1")
	d.AttemptTime = time.Unix(1_800_000_000, 0)
	out := Send(context.Background(), loopbackClient(), d)
	if out.Verdict != Success {
		t.Fatalf("outcome %+v", out)
	}
	if got.Method != http.MethodPost || got.URL.String() != "/hook?x=1" {
		t.Errorf("request %s %s", got.Method, got.URL)
	}
	if !bytes.Equal(gotBody, d.Body) {
		t.Errorf("body %q, want %q", gotBody, d.Body)
	}
	wantStandard, _ := SignStandard(d.Secret, d.ID, d.AttemptTime, d.Body)
	want := map[string]string{
		"Content-Type":          "application/json",
		"User-Agent":            "Mailyard-Webhooks/1",
		"X-Service-Event":       "delivered",
		"X-Service-Delivery-Id": d.ID,
		"X-Service-Signature":   SignSeed(d.Secret, d.Body),
		"Webhook-Id":            d.ID,
		"Webhook-Timestamp":     "1800000000",
		"Webhook-Signature":     wantStandard,
	}
	for k, v := range want {
		if g := got.Header.Get(k); g != v {
			t.Errorf("%s: %q, want %q", k, g, v)
		}
	}
}

func TestSendKeepsAtMost4KiB(t *testing.T) {
	long := strings.Repeat("0123456789abcdef", 1024) // 16 KiB
	rcv := startReceiver(t, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(500)
		w.Write([]byte(long))
	})
	out := Send(context.Background(), loopbackClient(), testDelivery(rcv.URL))
	if len(out.ResponseBody) != ResponseBodyLimit || !out.ResponseTruncated {
		t.Fatalf("kept %d bytes, truncated %v", len(out.ResponseBody), out.ResponseTruncated)
	}
	if string(out.ResponseBody) != long[:ResponseBodyLimit] {
		t.Error("kept bytes are not the start of the body")
	}
}

func TestSendInflatesGzip(t *testing.T) {
	rcv := startReceiver(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Encoding", "gzip")
		zw := gzip.NewWriter(w)
		zw.Write([]byte(`{"ok":true}`))
		zw.Close()
	})
	out := Send(context.Background(), loopbackClient(), testDelivery(rcv.URL))
	if out.Verdict != Success || string(out.ResponseBody) != `{"ok":true}` || out.ResponseTruncated {
		t.Fatalf("outcome %+v (body %q)", out, out.ResponseBody)
	}
}

// TestSendSurvivesGzipBomb: the receiver streams 1 GiB of zeros as gzip
// (about 1 MiB on the wire). Only 4 KiB may be inflated and kept.
func TestSendSurvivesGzipBomb(t *testing.T) {
	var member bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&member, gzip.BestCompression)
	zw.Write(make([]byte, 1<<20))
	zw.Close()
	rcv := startReceiver(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Encoding", "gzip")
		w.Header().Set("Content-Type", "text/plain")
		// Concatenated gzip members form one stream: 1024 members of
		// 1 MiB of zeros each inflate to 1 GiB.
		for range 1024 {
			if _, err := w.Write(member.Bytes()); err != nil {
				return
			}
		}
	})
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	start := time.Now()
	out := Send(context.Background(), loopbackClient(), testDelivery(rcv.URL))
	elapsed := time.Since(start)
	runtime.ReadMemStats(&after)

	if out.Verdict != Success || len(out.ResponseBody) != ResponseBodyLimit || !out.ResponseTruncated {
		t.Fatalf("outcome: verdict %v, %d bytes kept, truncated %v, error %q", out.Verdict, len(out.ResponseBody), out.ResponseTruncated, out.Error)
	}
	if !bytes.Equal(out.ResponseBody, make([]byte, ResponseBodyLimit)) {
		t.Error("kept bytes are not the inflated zeros")
	}
	if allocated := after.TotalAlloc - before.TotalAlloc; allocated > 32<<20 {
		t.Errorf("allocated %d MiB while reading the response", allocated>>20)
	}
	if elapsed > 5*time.Second {
		t.Errorf("took %v", elapsed)
	}
}

func TestSendTimesOut(t *testing.T) {
	release := make(chan struct{})
	rcv := startReceiver(t, func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	})
	defer close(release)
	start := time.Now()
	out := Send(context.Background(), loopbackClient(WithTimeout(200*time.Millisecond)), testDelivery(rcv.URL))
	if out.Verdict != Retryable || out.StatusCode != 0 || out.Error != "timed out after 200ms" {
		t.Fatalf("outcome %+v", out)
	}
	if elapsed := time.Since(start); elapsed > 3*time.Second {
		t.Errorf("took %v", elapsed)
	}
}

func TestSendConnectionRefused(t *testing.T) {
	rcv := startReceiver(t, nil)
	url := rcv.URL
	rcv.Close()
	out := Send(context.Background(), loopbackClient(), testDelivery(url))
	if out.Verdict != Retryable || out.StatusCode != 0 || !strings.Contains(out.Error, "connection refused") {
		t.Fatalf("outcome %+v", out)
	}
	if strings.Contains(out.Error, url) {
		t.Errorf("error text repeats the URL: %q", out.Error)
	}
}

func TestSendCanceled(t *testing.T) {
	rcv := startReceiver(t, nil)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	out := Send(ctx, loopbackClient(), testDelivery(rcv.URL))
	if out.Verdict != Retryable || out.Error != "attempt canceled" {
		t.Fatalf("outcome %+v", out)
	}
}

func TestSendBadSecret(t *testing.T) {
	rcv := startReceiver(t, nil)
	d := testDelivery(rcv.URL)
	d.Secret = "whsec_not base64!"
	out := Send(context.Background(), loopbackClient(), d)
	if out.Verdict != Retryable || out.Error == "" || strings.Contains(out.Error, "not base64!") {
		t.Fatalf("outcome %+v", out)
	}
	if n := rcv.requests.Load(); n != 0 {
		t.Fatalf("receiver saw %d unsigned requests", n)
	}
}

func readAll(t *testing.T, r *http.Request) []byte {
	t.Helper()
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(r.Body); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}
