package dnscheck

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestNewResolverAddress(t *testing.T) {
	tests := []struct{ resolver, want string }{
		{"127.0.0.1:5353", "127.0.0.1:5353"},
		{"192.0.2.53", "192.0.2.53:53"},
		{"2001:db8::53", "[2001:db8::53]:53"},
		{"[2001:db8::53]:5353", "[2001:db8::53]:5353"},
		{" resolver.internal ", "resolver.internal:53"},
	}
	for _, tt := range tests {
		c, err := New(tt.resolver, time.Second)
		if err != nil {
			t.Errorf("New(%q): %v", tt.resolver, err)
			continue
		}
		if !slices.Equal(c.servers, []string{tt.want}) {
			t.Errorf("New(%q) asks %v, want %s", tt.resolver, c.servers, tt.want)
		}
	}
	for _, bad := range []string{":53", "http://resolver", "resolver:dns", "resolver:70000"} {
		if _, err := New(bad, time.Second); err == nil {
			t.Errorf("New(%q): no error", bad)
		}
	}
	c, _ := New("127.0.0.1:53", 0)
	if c.timeout != defaultTimeout {
		t.Errorf("timeout 0 gives %s, want the default %s", c.timeout, defaultTimeout)
	}
}

func TestNewUsesSystemResolvers(t *testing.T) {
	conf := filepath.Join(t.TempDir(), "resolv.conf")
	if err := os.WriteFile(conf, []byte("# test\nsearch example.test\nnameserver 192.0.2.1\nnameserver 2001:db8::1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := newChecker("", time.Second, conf)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"192.0.2.1:53", "[2001:db8::1]:53"}; !slices.Equal(c.servers, want) {
		t.Errorf("servers = %v, want %v", c.servers, want)
	}

	if _, err := newChecker("", time.Second, filepath.Join(t.TempDir(), "missing")); err == nil || !strings.Contains(err.Error(), "system resolver") {
		t.Errorf("missing resolv.conf: error = %v", err)
	}
	empty := filepath.Join(t.TempDir(), "empty.conf")
	if err := os.WriteFile(empty, []byte("search example.test\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := newChecker("", time.Second, empty); err == nil || !strings.Contains(err.Error(), "no name server") {
		t.Errorf("resolv.conf without servers: error = %v", err)
	}
}
