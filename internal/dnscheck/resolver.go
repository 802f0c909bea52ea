package dnscheck

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
	defaultTimeout = 10 * time.Second
	// ednsBufferSize is the UDP payload size we accept (DNS Flag Day 2020).
	ednsBufferSize = 1232
	// maxCNAMEChain bounds how far an answer's CNAME chain is followed.
	maxCNAMEChain = 8
)

// Checker looks records up through a recursive resolver.
type Checker struct {
	servers []string // host:port, tried in order
	timeout time.Duration
}

// New returns a Checker that asks resolver ("host:port"; port 53 if
// omitted), or the name servers of /etc/resolv.conf when resolver is empty.
// timeout bounds one Check; zero or less means 10 seconds.
func New(resolver string, timeout time.Duration) (*Checker, error) {
	return newChecker(resolver, timeout, "/etc/resolv.conf")
}

func newChecker(resolver string, timeout time.Duration, resolvConf string) (*Checker, error) {
	if timeout <= 0 {
		timeout = defaultTimeout
	}
	resolver = strings.TrimSpace(resolver)
	if resolver != "" {
		addr, err := resolverAddress(resolver)
		if err != nil {
			return nil, err
		}
		return &Checker{servers: []string{addr}, timeout: timeout}, nil
	}
	conf, err := dns.ClientConfigFromFile(resolvConf)
	if err != nil {
		return nil, fmt.Errorf("read the system resolver configuration: %w; set the DNS resolver explicitly", err)
	}
	var servers []string
	for _, s := range conf.Servers {
		servers = append(servers, net.JoinHostPort(s, conf.Port))
	}
	if len(servers) == 0 {
		return nil, fmt.Errorf("%s lists no name server; set the DNS resolver explicitly", resolvConf)
	}
	return &Checker{servers: servers, timeout: timeout}, nil
}

func resolverAddress(resolver string) (string, error) {
	if host, port, err := net.SplitHostPort(resolver); err == nil {
		if n, err := strconv.Atoi(port); host == "" || err != nil || n < 1 || n > 65535 {
			return "", fmt.Errorf("DNS resolver %q is not host:port", resolver)
		}
		return resolver, nil
	}
	if strings.ContainsAny(resolver, "/ ") {
		return "", fmt.Errorf("DNS resolver %q is not host:port", resolver)
	}
	return net.JoinHostPort(strings.Trim(resolver, "[]"), "53"), nil
}

// lookup returns the records of type qtype at name, following a CNAME chain
// in the answer (a TXT or MX query for an alias is answered with the
// records of its target). NXDOMAIN and NODATA both give no records and no
// error; other failures give an error.
func (c *Checker) lookup(ctx context.Context, name string, qtype uint16) ([]dns.RR, error) {
	qname := dns.Fqdn(strings.TrimSpace(name))
	if _, ok := dns.IsDomainName(qname); !ok || qname == "." {
		return nil, fmt.Errorf("%q is not a valid DNS name", name)
	}
	msg := new(dns.Msg)
	msg.SetQuestion(qname, qtype) // sets RD: the resolver recurses for us
	msg.SetEdns0(ednsBufferSize, false)

	resp, err := c.exchange(ctx, msg)
	if err != nil {
		return nil, fmt.Errorf("look up %s %s: %w", dns.TypeToString[qtype], strings.TrimSuffix(qname, "."), err)
	}
	if resp.Rcode == dns.RcodeNameError {
		return nil, nil
	}
	return recordsAt(resp.Answer, qname, qtype), nil
}

func recordsAt(answer []dns.RR, owner string, qtype uint16) []dns.RR {
	for range maxCNAMEChain {
		var found []dns.RR
		alias := ""
		for _, rr := range answer {
			h := rr.Header()
			if !sameName(h.Name, owner) {
				continue
			}
			switch {
			case h.Rrtype == qtype:
				found = append(found, rr)
			case h.Rrtype == dns.TypeCNAME:
				alias = rr.(*dns.CNAME).Target
			}
		}
		if len(found) > 0 || alias == "" {
			return found
		}
		owner = alias
	}
	return nil
}

// exchange asks the servers in turn until one gives a usable answer
// (NOERROR or NXDOMAIN), sharing the time left between them.
//
// Its errors name a server by its place in the list, never by address:
// they reach customers (a domain's check results, an email's deferral), and
// the resolvers' addresses are the operator's network, not theirs.
func (c *Checker) exchange(ctx context.Context, msg *dns.Msg) (*dns.Msg, error) {
	var errs []error
	for i, server := range c.servers {
		name := "the resolver"
		if len(c.servers) > 1 {
			name = "resolver " + strconv.Itoa(i+1)
		}
		attemptCtx, cancel := attemptContext(ctx, len(c.servers)-i)
		resp, err := exchangeWith(attemptCtx, server, name, msg)
		cancel()
		if err == nil && (resp.Rcode == dns.RcodeSuccess || resp.Rcode == dns.RcodeNameError) {
			return resp, nil
		}
		if err == nil {
			err = fmt.Errorf("%s answered %s", name, rcodeName(resp.Rcode))
		}
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
	}
	return nil, errors.Join(errs...)
}

// attemptContext gives one server its share of the time left when
// remaining servers are still to be tried.
func attemptContext(ctx context.Context, remaining int) (context.Context, context.CancelFunc) {
	deadline, ok := ctx.Deadline()
	if !ok || remaining <= 1 {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, time.Until(deadline)/time.Duration(remaining))
}

// exchangeWith asks one server over UDP, and again over TCP when the UDP
// answer is truncated (a long TXT record may not fit). Its errors call the
// server name.
func exchangeWith(ctx context.Context, server, name string, msg *dns.Msg) (*dns.Msg, error) {
	started := time.Now()
	resp, err := exchangeUDP(ctx, server, msg)
	if err == nil && resp.Truncated {
		resp, _, err = (&dns.Client{Net: "tcp", Timeout: timeLeft(ctx)}).ExchangeContext(ctx, msg, server)
	}
	if err != nil {
		if isTimeout(err) {
			return nil, fmt.Errorf("no answer from %s within %s", name, time.Since(started).Round(time.Millisecond))
		}
		// A network error's text holds both addresses ("read udp
		// 10.0.0.5:41234->10.0.0.2:53: connection refused"): keep what
		// happened, not where.
		var opErr *net.OpError
		if errors.As(err, &opErr) && opErr.Err != nil {
			err = opErr.Err
		}
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return resp, nil
}

// firstRetransmit is how long a UDP query waits for its answer before it
// is sent again (a datagram lost on the way); each wait doubles, within the
// attempt's time. Without this the client library gave one datagram 2 s,
// however long the attempt had, and a single lost packet failed the check.
const firstRetransmit = time.Second

// exchangeUDP sends msg over UDP until an answer comes or ctx ends.
func exchangeUDP(ctx context.Context, server string, msg *dns.Msg) (*dns.Msg, error) {
	for wait := firstRetransmit; ; wait *= 2 {
		try := min(wait, timeLeft(ctx))
		resp, _, err := (&dns.Client{Net: "udp", UDPSize: ednsBufferSize, Timeout: try}).ExchangeContext(ctx, msg, server)
		if err == nil || !isTimeout(err) || ctx.Err() != nil {
			return resp, err
		}
		if _, bounded := ctx.Deadline(); !bounded {
			return resp, err // no time given: one try, the library's
		}
	}
}

// timeLeft is the time until ctx's deadline; 0 (the library's default)
// without one.
func timeLeft(ctx context.Context) time.Duration {
	if deadline, ok := ctx.Deadline(); ok {
		return max(time.Until(deadline), time.Millisecond)
	}
	return 0
}

func isTimeout(err error) bool {
	var netErr net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) ||
		(errors.As(err, &netErr) && netErr.Timeout())
}

func rcodeName(rcode int) string {
	if name, ok := dns.RcodeToString[rcode]; ok {
		return name
	}
	return fmt.Sprintf("RCODE %d", rcode)
}
