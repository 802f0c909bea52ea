package dnsserver

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/miekg/dns"
)

// Source holds the TXT records of the zone.
type Source interface {
	// LookupTXT returns the TXT values of name, which is lower-case and
	// fully qualified without a trailing dot. Each value is one logical
	// string, whatever its length. An empty slice means the name does not
	// exist.
	LookupTXT(ctx context.Context, name string) ([]string, error)
}

// lookupTimeout bounds one Source look-up, so that a slow database turns
// into SERVFAIL before resolvers give up on us.
const lookupTimeout = 2 * time.Second

// Server answers authoritatively for one zone.
type Server struct {
	zone string // canonical: lower-case, fully qualified
	src  Source
	// lookups guards the zone's look-ups of src (lookups.go).
	lookups *lookups
	// dev, when set, answers for dev customer domains (WithDevDomains).
	dev    DevSource
	logger *slog.Logger
	// serial is the SOA serial. The zone has no secondaries to notify, so
	// the serial only needs to be a plausible, increasing number: the start
	// time of the process.
	serial uint32
	// nsAddrs are the addresses of the name server ns1.<zone>
	// (WithNameServerAddresses); none: it is answered NXDOMAIN.
	nsAddrs []net.IP
	// limiter limits UDP answers per client network
	// (WithResponseRateLimit); nil: unlimited.
	limiter *responseLimiter
	// tcpCounted overrides which TCP clients have the per-client cap
	// (tcplimit.go); nil: all but loopback. Tests count loopback.
	tcpCounted func(netip.Addr) bool
}

// WithResponseRateLimit limits the UDP answers to each client network to
// perSecond (ratelimit.go); 0 leaves them unlimited.
func (s *Server) WithResponseRateLimit(perSecond int) *Server {
	s.limiter = nil
	if perSecond > 0 {
		s.limiter = newResponseLimiter(perSecond)
	}
	return s
}

// WithNameServerAddresses makes the server answer A and AAAA queries for
// its name server, ns1.<zone>, with addrs: the addresses the parent zone's
// glue gives for it. A resolver that asks the zone itself for its name
// server's address then finds it, where it would otherwise get NXDOMAIN
// and lose the delegation once the glue's TTL ran out.
func (s *Server) WithNameServerAddresses(addrs []net.IP) *Server {
	s.nsAddrs = addrs
	return s
}

// New returns a server for zone (such as "dkim.mailyard.test") answering
// from src. A nil logger discards logs.
func New(zone string, src Source, logger *slog.Logger) *Server {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Server{
		zone:    dns.CanonicalName(strings.TrimSpace(zone)),
		src:     src,
		lookups: newLookups(src),
		logger:  logger,
		serial:  uint32(time.Now().Unix()),
	}
}

// ListenAndServe serves UDP and TCP on addr (host:port) until ctx is done,
// then shuts both down and returns nil. With port 0 both listen on the same
// free port.
func (s *Server) ListenAndServe(ctx context.Context, addr string) error {
	udp, tcp, err := listen(addr)
	if err != nil {
		return err
	}
	return s.Serve(ctx, udp, tcp)
}

// listen binds UDP first and then TCP on the port UDP got, which lets port
// 0 mean one free port for both transports, as DNS clients expect.
func listen(addr string) (net.PacketConn, net.Listener, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, nil, fmt.Errorf("DNS listen address %q: %w", addr, err)
	}
	attempts := 1
	if port == "0" {
		// Another process may hold the TCP side of the free UDP port.
		attempts = 10
	}
	for {
		udp, err := net.ListenPacket("udp", addr)
		if err != nil {
			return nil, nil, fmt.Errorf("listen on UDP %s: %w", addr, err)
		}
		udpPort := strconv.Itoa(udp.LocalAddr().(*net.UDPAddr).Port)
		tcp, err := net.Listen("tcp", net.JoinHostPort(host, udpPort))
		if err == nil {
			return udp, tcp, nil
		}
		udp.Close()
		if attempts--; attempts == 0 {
			return nil, nil, fmt.Errorf("listen on TCP %s: %w", net.JoinHostPort(host, udpPort), err)
		}
	}
}

// Serve answers on the given UDP connection and TCP listener until ctx is
// done, then shuts both down and returns nil. It returns an error if either
// stops serving on its own. Tests use it with listeners bound to port 0.
func (s *Server) Serve(ctx context.Context, udp net.PacketConn, tcp net.Listener) error {
	h := &handler{server: s, ctx: ctx}
	limited := limitTCP(tcp)
	if s.tcpCounted != nil {
		limited.counted = s.tcpCounted
	}
	tcp = limited
	started := make(chan *dns.Server, 2)
	failed := make(chan error, 2)
	for _, srv := range []*dns.Server{
		{PacketConn: udp, Handler: h},
		{Listener: tcp, Handler: h},
	} {
		srv.NotifyStartedFunc = func() { started <- srv }
		go func() {
			if err := srv.ActivateAndServe(); err != nil {
				failed <- err
			}
		}()
	}
	// Shutting a miekg/dns server down before it has started fails, and it
	// would then serve forever: keep track of the ones that run. Closing
	// the sockets as well stops one that starts late.
	var running []*dns.Server
	defer func() {
		shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		for _, srv := range running {
			_ = srv.ShutdownContext(shutdownCtx)
		}
		udp.Close()
		tcp.Close()
	}()

	for len(running) < 2 {
		select {
		case srv := <-started:
			running = append(running, srv)
		case err := <-failed:
			return fmt.Errorf("DNS server stopped: %w", err)
		case <-ctx.Done():
			return nil
		}
	}
	s.logger.Info("DNS server started", "zone", strings.TrimSuffix(s.zone, "."),
		"udp", udp.LocalAddr().String(), "tcp", tcp.Addr().String())

	select {
	case <-ctx.Done():
		return nil
	case err := <-failed:
		return fmt.Errorf("DNS server stopped: %w", err)
	}
}
