package smtpserver

import "testing"

// Once Wait has begun, a message committed by a session still running adds
// no start (the sweep makes it), so the WaitGroup never grows while it is
// waited for.
func TestNoStartAfterTheWait(t *testing.T) {
	var s Starts
	ran := make(chan struct{})
	s.Go(func() { close(ran) })
	s.Wait()
	<-ran
	s.Go(func() { t.Error("a start after the wait") })
	s.Wait()
}
