package egress

import (
	"errors"
	"net"
	"os"
	"syscall"
	"testing"
)

func TestDescribe(t *testing.T) {
	local, _ := net.ResolveTCPAddr("tcp", "10.0.0.5:41234")
	remote, _ := net.ResolveTCPAddr("tcp", "192.0.2.7:443")
	refused := &net.OpError{Op: "dial", Net: "tcp", Addr: remote, Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	reset := &net.OpError{Op: "read", Net: "tcp", Source: local, Addr: remote, Err: os.NewSyscallError("read", syscall.ECONNRESET)}
	for _, tc := range []struct {
		err  error
		want string
	}{
		{&net.DNSError{Name: "hooks.example", Err: "no such host", Server: "10.255.255.53:53", IsNotFound: true}, "DNS lookup of hooks.example failed: no such host"},
		{&net.DNSError{Name: "hooks.example", Err: "i/o timeout", Server: "10.255.255.53:53", IsTimeout: true}, "DNS lookup of hooks.example failed: timed out"},
		{&net.DNSError{Name: "hooks.example", Err: "read udp 10.0.0.5:1->10.255.255.53:53: read: connection refused", Server: "10.255.255.53:53"},
			"DNS lookup of hooks.example failed: the resolver could not be reached"},
		{&net.DNSError{Name: "hooks.example", Err: "server misbehaving", Server: "10.255.255.53:53", IsTemporary: true}, "DNS lookup of hooks.example failed: server misbehaving"},
		{refused, "connection refused"},
		{reset, "connection reset by peer"},
		{&net.OpError{Op: "remote error", Err: errors.New("tls: protocol version not supported")}, "remote error: tls: protocol version not supported"},
		{errors.New("EOF"), "EOF"},
	} {
		if got := Describe(tc.err); got != tc.want {
			t.Errorf("Describe(%v) = %q, want %q", tc.err, got, tc.want)
		}
	}
}
