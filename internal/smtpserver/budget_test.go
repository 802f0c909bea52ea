package smtpserver

import (
	"sync/atomic"
	"testing"
	"time"
)

// The messages that all sessions hold at once stay within
// MaxMessageBytesInFlight: while one session holds most of it, another's
// message waits and then gets 451 4.3.2 (sent again later), and once the
// first is stored the budget is back.
func TestMessagesInFlightStayWithinTheBudget(t *testing.T) {
	b := newBackend()
	hold := make(chan struct{})
	var stores atomic.Int32
	b.store = func() error {
		if stores.Add(1) == 1 {
			<-hold
		}
		return nil
	}
	_, addr := start(t, Config{MaxMessageBytes: 100 << 10, MaxMessageBytesInFlight: 150 << 10, IdleTimeout: 2 * time.Second}, b)
	msg := string(message(90<<10)) + ".\r\n"

	first := dial(t, addr)
	first.transaction()
	first.send(msg)
	for deadline := time.Now().Add(5 * time.Second); stores.Load() == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the first message never reached the store")
		}
	}

	second := dial(t, addr)
	second.transaction()
	second.send(msg)
	second.expect("451 4.3.2 ")

	close(hold)
	first.expect("250 ")
	second.send("MAIL FROM:<a@client.test>\r\nRCPT TO:<b@mx.mailyard.test>\r\nDATA\r\n")
	second.expect("250 ")
	second.expect("250 ")
	second.expect("354 ")
	second.send(msg)
	second.expect("250 ")
	if n := len(b.delivered()); n != 2 {
		t.Fatalf("%d messages stored, want 2", n)
	}
}

// A budget smaller than one message would refuse the largest for ever.
func TestBudgetHoldsOneMessage(t *testing.T) {
	if _, err := New(Config{Hostname: "mx.test", MaxMessageBytes: 1 << 20, MaxMessageBytesInFlight: 1 << 19}, newBackend()); err == nil {
		t.Fatal("a budget of half a message was taken")
	}
}

// One client address holds at most a quarter of the budget (at least two
// messages), however many connections it opens: past its share its next
// message gets 451 4.3.2 at once, while another address's message is taken
// from the budget left.
func TestOneClientHoldsAShareOfTheBudget(t *testing.T) {
	b := newBackend()
	hold := make(chan struct{})
	var stores atomic.Int32
	b.store = func() error {
		stores.Add(1)
		<-hold
		return nil
	}
	s := build(t, Config{MaxMessageBytes: 20 << 10, MaxMessageBytesInFlight: 400 << 10, IdleTimeout: 5 * time.Second}, b)
	s.capLoopback = true
	addr := serve(t, s)
	msg := string(message(19<<10)) + ".\r\n"

	var held []*client
	for range 5 { // 95 KiB of the client's 100
		c := dial(t, addr)
		c.transaction()
		c.send(msg)
		held = append(held, c)
	}
	eventually(t, func() bool { return stores.Load() == 5 })
	over := dial(t, addr)
	over.transaction()
	over.send(msg)
	started := time.Now()
	over.expect("451 4.3.2 ")
	if waited := time.Since(started); waited > time.Second {
		t.Errorf("the client past its share waited %s for the budget", waited)
	}

	other := dialFrom(t, addr, "127.0.0.2")
	other.transaction()
	other.send(msg)
	eventually(t, func() bool { return stores.Load() == 6 })

	close(hold)
	for _, c := range append(held, other) {
		c.expect("250 ")
	}
	// The shares are given back with the messages.
	over.send("MAIL FROM:<a@client.test>\r\nRCPT TO:<b@mx.mailyard.test>\r\nDATA\r\n")
	over.expect("250 ")
	over.expect("250 ")
	over.expect("354 ")
	over.send(msg)
	over.expect("250 ")
}
