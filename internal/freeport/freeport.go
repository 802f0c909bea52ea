// Package freeport picks ports nobody listens on, for servers that run as other
// processes and must be told a port rather than handed a listener (the Temporal
// dev server and the real Temporal server, BIND, mailyard's own processes in the
// tests), and binds one port for both UDP and TCP for a DNS server in the
// process (ListenBoth). The one implementation for the product and its tests.
package freeport

import (
	"fmt"
	"math/rand/v2"
	"net"
	"strconv"
	"sync"
)

// The range ports are picked from. It ends below the kernel's ephemeral ports
// (32768 and up on Linux), so a port is not taken meanwhile by some outgoing
// connection, and because the real Temporal server's SQL schema stores
// membership ports as smallint: it refuses ports from 32768 at start.
const (
	low  = 20000
	high = 32767
)

// given holds the ports this process handed out: a port is free again as soon as
// Ports returns it, until its server binds it, so a later call (the next process
// of the same test) would otherwise get it again now and then.
var given = struct {
	sync.Mutex
	ports map[int]bool
}{ports: map[int]bool{}}

// Ports returns n distinct ports on ip that nobody listens on right now, for TCP
// and for UDP both (as a DNS server needs), and that this process has not handed
// out before. Another process may still take one before its server binds it, as
// with any free-port choice.
func Ports(ip string, n int) ([]int, error) {
	given.Lock()
	defer given.Unlock()
	var ports []int
	for tries := 0; len(ports) < n; tries++ {
		if tries == 1000 {
			return nil, fmt.Errorf("no %d free ports on %s between %d and %d", n, ip, low, high)
		}
		port := low + rand.IntN(high-low+1)
		if given.ports[port] {
			continue
		}
		addr := net.JoinHostPort(ip, strconv.Itoa(port))
		l, err := net.Listen("tcp", addr)
		if err != nil {
			continue
		}
		defer l.Close()
		pc, err := net.ListenPacket("udp", addr)
		if err != nil {
			continue
		}
		defer pc.Close()
		ports = append(ports, port)
		given.ports[port] = true
	}
	return ports, nil
}

// WithCompanion returns a port of Ports whose port+offset is free too and
// within the range, for a server that opens a second port at a fixed
// distance from its first (the Temporal dev server's UI, at port+1000 under
// `mailyard dev`): left to chance, the companion port may fall among the
// kernel's ephemeral ports and be taken by an outgoing connection.
func WithCompanion(ip string, offset int) (int, error) {
	for range 100 {
		port, err := Port(ip)
		if err != nil {
			return 0, err
		}
		if port+offset > high {
			continue
		}
		l, err := net.Listen("tcp", net.JoinHostPort(ip, strconv.Itoa(port+offset)))
		if err != nil {
			continue
		}
		_ = l.Close()
		given.Lock()
		given.ports[port+offset] = true
		given.Unlock()
		return port, nil
	}
	return 0, fmt.Errorf("no free port on %s with a free companion %d above it", ip, offset)
}

// Port is one port of Ports.
func Port(ip string) (int, error) {
	ports, err := Ports(ip, 1)
	if err != nil {
		return 0, err
	}
	return ports[0], nil
}

// ListenBoth binds UDP and TCP on one port of ip, as a DNS server in the
// same process serves both: the kernel picks a free UDP port, and TCP must
// get the same one, which another listener may hold, so it tries again
// with other ports a few times.
func ListenBoth(ip string) (net.PacketConn, net.Listener, error) {
	var err error
	for range 20 {
		var pc net.PacketConn
		if pc, err = net.ListenPacket("udp", net.JoinHostPort(ip, "0")); err != nil {
			return nil, nil, err
		}
		var ln net.Listener
		if ln, err = net.Listen("tcp", pc.LocalAddr().String()); err == nil {
			return pc, ln, nil
		}
		pc.Close()
	}
	return nil, nil, fmt.Errorf("no port of %s free for both UDP and TCP: %w", ip, err)
}
