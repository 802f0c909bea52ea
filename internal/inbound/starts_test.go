package inbound

import "testing"

// Once Serve waits for the workflow starts under way, a message committed
// by a session still running adds none (the sweep starts it), so the
// WaitGroup never grows while it is waited for.
func TestNoStartAfterTheWait(t *testing.T) {
	b := &Backend{}
	ran := make(chan struct{})
	b.goStart(func() { close(ran) })
	b.waitStarts()
	<-ran
	b.goStart(func() { t.Error("a start after the wait") })
	b.waitStarts()
}
