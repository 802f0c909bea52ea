package pebbletest_test

import (
	"crypto/tls"
	"crypto/x509"
	"net"
	"net/http"
	"os"
	"testing"

	"github.com/miekg/dns"

	"github.com/mailyard/mailyard/internal/pebbletest"
)

// Pebble starts, answers its directory over HTTPS with the test's own
// certificate and hands out its issuing root; its DNS server resolves the
// test's names to 127.0.0.1 only.
func TestStart(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	p := pebbletest.Start(t, pebbletest.Options{
		TLSPort: ln.Addr().(*net.TCPAddr).Port,
		Hosts:   []string{"Track.Shop.Example."},
	})
	resp, err := p.HTTPClient.Get(p.DirectoryURL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("directory: %s", resp.Status)
	}
	if p.Roots == nil {
		t.Fatal("no root")
	}
	// CAFile is what Pebble's HTTPS certificate verifies against.
	caPEM, err := os.ReadFile(p.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		t.Fatalf("CAFile holds no PEM certificate: %q", caPEM)
	}
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}
	defer tr.CloseIdleConnections()
	resp, err = (&http.Client{Transport: tr}).Get(p.DirectoryURL)
	if err != nil {
		t.Fatalf("directory with CAFile's roots: %v", err)
	}
	resp.Body.Close()

	client := &dns.Client{Net: "tcp"} // as Pebble asks
	ask := func(name string, qtype uint16) *dns.Msg {
		t.Helper()
		m := new(dns.Msg)
		m.SetQuestion(name, qtype)
		in, _, err := client.Exchange(m, p.DNSAddr)
		if err != nil {
			t.Fatal(err)
		}
		return in
	}
	if in := ask("track.shop.example.", dns.TypeA); len(in.Answer) != 1 || in.Answer[0].(*dns.A).A.String() != "127.0.0.1" {
		t.Fatalf("A: %v", in)
	}
	if in := ask("track.shop.example.", dns.TypeAAAA); len(in.Answer) != 0 || in.Rcode != dns.RcodeSuccess {
		t.Fatalf("AAAA: %v", in)
	}
	if in := ask("other.example.", dns.TypeA); in.Rcode != dns.RcodeNameError {
		t.Fatalf("unknown name: %v", in)
	}
}
