package webhook

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"testing"
	"time"
)

// TestEnvironmentProxiesIgnored: a proxy would connect on the client's
// behalf, past the dial-time address check, so the environment's proxy
// settings must not be used. The receiver is reached by name because Go
// never proxies loopback literals anyway, and the proxy is a canary that
// counts connections.
func TestEnvironmentProxiesIgnored(t *testing.T) {
	proxy := startCanary(t)
	proxyURL := fmt.Sprintf("http://127.0.0.1:%d", proxy.port)
	for _, k := range []string{"HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"} {
		t.Setenv(k, proxyURL)
	}
	t.Setenv("NO_PROXY", "")
	t.Setenv("no_proxy", "")

	rcv := startReceiver(t, nil)
	resolver := startTestDNS(t, map[string][]string{"receiver.example.test": {"127.0.0.1"}})
	client := NewClient(Policy{AllowHTTP: true, AllowPrivateNetworks: true}, WithResolver(resolver))
	if tr := client.Transport.(schemeGuard).next; tr.Proxy != nil {
		t.Fatal("transport has a Proxy function")
	}

	port := rcv.Listener.Addr().(*net.TCPAddr).Port
	out := Send(context.Background(), client, testDelivery(fmt.Sprintf("http://receiver.example.test:%d/hook", port)))
	if out.Verdict != Success || out.StatusCode != http.StatusOK {
		t.Fatalf("outcome %+v", out)
	}
	if n := rcv.requests.Load(); n != 1 {
		t.Fatalf("receiver saw %d requests, want 1", n)
	}
	time.Sleep(50 * time.Millisecond)
	if n := proxy.conns.Load(); n != 0 {
		t.Fatalf("proxy saw %d connections", n)
	}
}
