package freeport

import (
	"net"
	"strconv"
	"testing"
)

// The ports are distinct, in the range, and a server can then bind each for TCP
// and UDP on the address asked for.
func TestPortsAreFreeForTCPAndUDP(t *testing.T) {
	ports, err := Ports("127.0.0.1", 9)
	if err != nil {
		t.Fatal(err)
	}
	if len(ports) != 9 {
		t.Fatalf("got %d ports, want 9", len(ports))
	}
	seen := map[int]bool{}
	for _, p := range ports {
		if p < low || p > high {
			t.Errorf("port %d is outside %d-%d", p, low, high)
		}
		if seen[p] {
			t.Errorf("port %d comes twice", p)
		}
		seen[p] = true
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(p))
		l, err := net.Listen("tcp", addr)
		if err != nil {
			t.Errorf("TCP %s: %v", addr, err)
			continue
		}
		l.Close()
		pc, err := net.ListenPacket("udp", addr)
		if err != nil {
			t.Errorf("UDP %s: %v", addr, err)
			continue
		}
		pc.Close()
	}
}

// A port somebody listens on is never returned.
func TestPortSkipsTakenPorts(t *testing.T) {
	var held []net.Listener
	defer func() {
		for _, l := range held {
			l.Close()
		}
	}()
	taken := map[int]bool{}
	for p := low; p < low+200; p++ {
		if l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p))); err == nil {
			held = append(held, l)
			taken[p] = true
		}
	}
	for range 200 {
		p, err := Port("127.0.0.1")
		if err != nil {
			t.Fatal(err)
		}
		if taken[p] {
			t.Fatalf("port %d is in use and was returned", p)
		}
	}
}

// A port once handed out is not handed out again by this process, even though
// nobody listens on it.
func TestPortIsNotHandedOutTwice(t *testing.T) {
	seen := map[int]bool{}
	for range 2000 {
		p, err := Port("127.0.0.1")
		if err != nil {
			t.Fatal(err)
		}
		if seen[p] {
			t.Fatalf("port %d handed out twice", p)
		}
		seen[p] = true
	}
}

// ListenBoth hands back UDP and TCP listeners on one port.
func TestListenBothBindsOnePortForUDPAndTCP(t *testing.T) {
	pc, ln, err := ListenBoth("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	defer ln.Close()
	if pc.LocalAddr().String() != ln.Addr().String() {
		t.Fatalf("UDP on %s, TCP on %s", pc.LocalAddr(), ln.Addr())
	}
}

// A port with a companion: both in the range (the companion never among the
// kernel's ephemeral ports), both free, neither handed out again.
func TestWithCompanion(t *testing.T) {
	for range 50 {
		port, err := WithCompanion("127.0.0.1", 1000)
		if err != nil {
			t.Fatal(err)
		}
		if port < low || port+1000 > high {
			t.Fatalf("port %d and companion %d outside %d-%d", port, port+1000, low, high)
		}
		for _, p := range []int{port, port + 1000} {
			l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
			if err != nil {
				t.Fatalf("port %d: %v", p, err)
			}
			l.Close()
		}
		given.Lock()
		handedOut := given.ports[port] && given.ports[port+1000]
		given.Unlock()
		if !handedOut {
			t.Fatalf("port %d or its companion may be handed out again", port)
		}
	}
}
