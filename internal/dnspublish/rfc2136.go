package dnspublish

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/miekg/dns"
)

const (
	// recordTTL is short so that a replaced key is seen soon by verifiers.
	recordTTL = 300
	// tsigFudge is the clock skew the server accepts (RFC 8945 recommends
	// 300 seconds).
	tsigFudge = 300
	// defaultUpdateTimeout bounds one UPDATE exchange when the caller's
	// context has no earlier deadline.
	defaultUpdateTimeout = 10 * time.Second
)

// RFC2136 publishes by dynamic update (RFC 2136) signed with TSIG (RFC 8945)
// to the primary server of the DKIM zone.
type RFC2136 struct {
	server string // host:port
	zone   string // canonical, fully qualified
	key    tsigKey
	// Timeout bounds one exchange with the server.
	Timeout time.Duration
}

var _ Publisher = (*RFC2136)(nil)

// NewRFC2136 returns a publisher that updates zone on server ("host" or
// "host:port"; port 53 by default), signing with tsig given as
// "name:algorithm:base64secret".
func NewRFC2136(server, tsig, zone string) (*RFC2136, error) {
	addr, err := serverAddress(server)
	if err != nil {
		return nil, err
	}
	key, err := parseTSIG(tsig)
	if err != nil {
		return nil, err
	}
	zone = strings.TrimSpace(zone)
	if _, ok := dns.IsDomainName(zone); !ok || zone == "" || zone == "." {
		return nil, fmt.Errorf("DNS zone %q is not a valid zone name", zone)
	}
	return &RFC2136{
		server:  addr,
		zone:    dns.CanonicalName(zone),
		key:     key,
		Timeout: defaultUpdateTimeout,
	}, nil
}

func serverAddress(server string) (string, error) {
	server = strings.TrimSpace(server)
	if server == "" {
		return "", errors.New("RFC 2136 server is empty; set it to the primary server of the DKIM zone as host or host:port")
	}
	if host, port, err := net.SplitHostPort(server); err == nil {
		if n, err := strconv.Atoi(port); host == "" || err != nil || n < 1 || n > 65535 {
			return "", fmt.Errorf("RFC 2136 server %q is not host or host:port", server)
		}
		return server, nil
	}
	// No port: a host name, an IPv4 address or a bare IPv6 address.
	return net.JoinHostPort(strings.Trim(server, "[]"), "53"), nil
}

// Publish sends one UPDATE that, for each record, deletes the TXT RRset of
// the name and adds the new value. The server applies an UPDATE atomically,
// so republishing replaces a value without a moment where the name has none.
func (p *RFC2136) Publish(ctx context.Context, records []Record) error {
	if len(records) == 0 {
		return nil
	}
	msg := p.newUpdate()
	for _, r := range records {
		owner, err := p.ownerName(r.Name)
		if err != nil {
			return err
		}
		msg.RemoveRRset([]dns.RR{&dns.ANY{Hdr: dns.RR_Header{Name: owner, Rrtype: dns.TypeTXT, Class: dns.ClassANY}}})
		msg.Insert([]dns.RR{&dns.TXT{
			Hdr: dns.RR_Header{Name: owner, Rrtype: dns.TypeTXT, Class: dns.ClassINET, Ttl: recordTTL},
			Txt: TXTStrings(r.Value),
		}})
	}
	return p.send(ctx, msg, "publish")
}

// Unpublish sends one UPDATE that deletes the TXT RRset of each name.
// Deleting an RRset that does not exist is not an error in RFC 2136.
func (p *RFC2136) Unpublish(ctx context.Context, names []string) error {
	if len(names) == 0 {
		return nil
	}
	msg := p.newUpdate()
	for _, n := range names {
		owner, err := p.ownerName(n)
		if err != nil {
			return err
		}
		msg.RemoveRRset([]dns.RR{&dns.ANY{Hdr: dns.RR_Header{Name: owner, Rrtype: dns.TypeTXT, Class: dns.ClassANY}}})
	}
	return p.send(ctx, msg, "unpublish")
}

func (p *RFC2136) newUpdate() *dns.Msg {
	msg := new(dns.Msg)
	msg.SetUpdate(p.zone)
	return msg
}

// ownerName checks that name lies in the zone: a server would refuse the
// whole UPDATE with NOTZONE, and the error is clearer here.
func (p *RFC2136) ownerName(name string) (string, error) {
	canonical, err := canonicalName(name)
	if err != nil {
		return "", err
	}
	owner := dns.Fqdn(canonical)
	if _, ok := dns.IsDomainName(owner); !ok {
		return "", fmt.Errorf("record name %q is not a valid DNS name", name)
	}
	if !dns.IsSubDomain(p.zone, owner) {
		return "", fmt.Errorf("record name %q is outside the zone %s", name, strings.TrimSuffix(p.zone, "."))
	}
	return owner, nil
}

// send signs msg, sends it over TCP (a TXT record with a DKIM key does not
// fit a classic UDP message, and TCP avoids truncation and spoofing
// altogether) and checks the answer.
func (p *RFC2136) send(ctx context.Context, msg *dns.Msg, action string) error {
	msg.SetTsig(p.key.name, p.key.algorithm, tsigFudge, time.Now().Unix())
	client := &dns.Client{
		Net:        "tcp",
		Timeout:    p.Timeout,
		TsigSecret: map[string]string{p.key.name: p.key.secret},
	}
	if p.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, p.Timeout)
		defer cancel()
	}
	resp, _, err := client.ExchangeContext(ctx, msg, p.server)
	// A server that rejects the signature answers NOTAUTH with an unsigned
	// TSIG record, which miekg/dns reports as a verification error: the
	// RCODE says more, so it is looked at first.
	if resp != nil && resp.Rcode != dns.RcodeSuccess {
		return &UpdateError{Action: action, Server: p.server, Zone: strings.TrimSuffix(p.zone, "."), Rcode: resp.Rcode, TSIGError: tsigError(resp)}
	}
	if err != nil {
		if errors.Is(err, dns.ErrSig) || errors.Is(err, dns.ErrTime) {
			return fmt.Errorf("%s DNS records: the answer of %s failed TSIG verification (%v); check the TSIG secret and the clock", action, p.server, err)
		}
		return fmt.Errorf("%s DNS records: dynamic update to %s: %w", action, p.server, err)
	}
	// miekg/dns verifies an answer's TSIG only when it has one: an unsigned
	// NOERROR (a forger on the way, a proxy that strips the record) would
	// record keys as published that are not. RFC 8945 §5.3.1: the server
	// MUST sign its answer to a signed request.
	if resp.IsTsig() == nil {
		return fmt.Errorf("%s DNS records: the answer of %s is not signed with the TSIG key, so it cannot be trusted", action, p.server)
	}
	return nil
}

// tsigError returns the TSIG error code of a response (BADSIG, BADKEY,
// BADTIME), or 0.
func tsigError(resp *dns.Msg) uint16 {
	if t := resp.IsTsig(); t != nil {
		return t.Error
	}
	return 0
}
