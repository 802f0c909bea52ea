package webhook

import (
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"
)

const testSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

// receiver is a loopback webhook receiver that counts requests.
type receiver struct {
	*httptest.Server
	requests atomic.Int64
}

// startReceiver serves handler (or a plain 200) over http on loopback.
func startReceiver(t *testing.T, handler http.HandlerFunc) *receiver {
	t.Helper()
	r := &receiver{}
	r.Server = httptest.NewUnstartedServer(r.wrap(handler))
	r.Config.ErrorLog = log.New(io.Discard, "", 0)
	r.Start()
	t.Cleanup(r.Close)
	return r
}

func (r *receiver) wrap(handler http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, req *http.Request) {
		r.requests.Add(1)
		if handler == nil {
			w.WriteHeader(http.StatusOK)
			return
		}
		handler(w, req)
	}
}

// loopbackClient is the client of a policy that permits test receivers.
func loopbackClient(opts ...Option) *http.Client {
	return NewClient(Policy{AllowHTTP: true, AllowPrivateNetworks: true}, opts...)
}

func testDelivery(url string) Delivery {
	body, err := BuildBody("delivered", time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC),
		"0b8f5c1e-3f7a-4c1e-9d55-6a0f8f7d2b11", "ada@example.com", "Hello <Ada> & friends")
	if err != nil {
		panic(err)
	}
	return Delivery{
		URL:       url,
		Secret:    testSecret,
		ID:        "7d9c4d43-2f0e-4f57-a7a4-0f2b7b6f9d01",
		EventType: "delivered",
		Body:      body,
	}
}
