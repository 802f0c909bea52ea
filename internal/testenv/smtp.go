package testenv

import (
	"net"
	"testing"

	"github.com/emersion/go-smtp"
)

// ServeSMTP serves srv (a go-smtp server a test configured) on a loopback
// port until the test ends, and returns its address.
func ServeSMTP(t testing.TB, srv *smtp.Server) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	return l.Addr().String()
}
