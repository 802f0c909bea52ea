package smtpserver

import "sync"

// Starts runs the work a session leaves behind its 250 (starting a
// workflow), so that the reply does not wait for Temporal, and lets the
// server wait for that work when it stops. Once Wait has begun, Go runs
// nothing: the message is committed, and the sweep of stored messages whose
// workflow did not start makes the start instead. (A WaitGroup must not
// grow while it is waited for, and a session can outlive the listener's
// shutdown.) The zero value is ready.
type Starts struct {
	mu       sync.Mutex
	stopping bool
	wg       sync.WaitGroup
}

// Go runs start in the background, unless Wait has begun.
func (s *Starts) Go(start func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopping {
		return
	}
	s.wg.Go(start)
}

// Wait stops new starts and waits for those under way.
func (s *Starts) Wait() {
	s.mu.Lock()
	s.stopping = true
	s.mu.Unlock()
	s.wg.Wait()
}
