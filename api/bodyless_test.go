package api_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/mailyard/mailyard/internal/testenv"
)

// A POST without a body to an operation whose body is optional is answered
// as the operation decides however long it takes: here a test event while
// Temporal takes connections and never answers is 503 once the start gives
// up. Before, Huma's 5-second body read deadline ended net/http's background
// read of the connection and canceled the request: 500.
func TestBodylessRequestOutlivesTheBodyReadDeadline(t *testing.T) {
	h := newHarness(t)
	id, _ := h.createWebhook(h.adminKey, "https://hooks.example.com/in", "delivered")
	silent, _ := testenv.SilentServer(t, "127.0.0.1:0", false)
	down := httpServer(t, h.apiWithTemporalAt(silent).Handler())
	began := time.Now()
	h.doAt(down.URL, "POST", fmt.Sprintf("/api/v1/webhooks/%d/test", id), h.adminKey, nil, nil).expectError(t, 503, "unavailable")
	if took := time.Since(began); took < 5*time.Second {
		t.Fatalf("answered after %v: the start did not outlast the body read deadline, so this proves nothing", took)
	}
}
