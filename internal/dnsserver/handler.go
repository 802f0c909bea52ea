package dnsserver

import (
	"context"
	"errors"
	"net"
	"strings"
	"time"

	"github.com/miekg/dns"

	"github.com/mailyard/mailyard/internal/metrics"
)

// ednsUDPSize is the UDP payload size we advertise and honour at most: the
// DNS Flag Day 2020 value, which avoids IP fragmentation.
const ednsUDPSize = 1232

// handler answers the queries of one Serve call; ctx ends with it.
type handler struct {
	server *Server
	ctx    context.Context
}

func (h *handler) ServeDNS(w dns.ResponseWriter, req *dns.Msg) {
	// A limited client is not even looked up for (ratelimit.go).
	switch h.server.limit(w.RemoteAddr()) {
	case answerDropped:
		metrics.CountDNSLimited("dropped")
		return
	case answerTruncated:
		metrics.CountDNSLimited("truncated")
		resp := new(dns.Msg).SetReply(req)
		resp.Truncated = true
		if req.IsEdns0() != nil {
			// RFC 6891 §7: a truncated answer to an EDNS query keeps its
			// OPT record, or the resolver may take the server for one
			// without EDNS.
			resp.SetEdns0(ednsUDPSize, false)
		}
		if err := w.WriteMsg(resp); err != nil {
			h.server.logger.Debug("DNS answer not sent", "remote", w.RemoteAddr().String(), "error", err)
		}
		return
	}
	resp := h.server.answer(h.ctx, req)
	countQuery(req, resp)
	limitSize(resp, req, w)
	if err := w.WriteMsg(resp); err != nil {
		h.server.logger.Debug("DNS answer not sent", "remote", w.RemoteAddr().String(), "error", err)
	}
}

// limit says what becomes of an answer to remote: UDP answers are rate
// limited when the server has a limiter (WithResponseRateLimit).
func (s *Server) limit(remote net.Addr) limitAction {
	udp, isUDP := remote.(*net.UDPAddr)
	if s.limiter == nil || !isUDP {
		return answerFully
	}
	return s.limiter.decide(udp.AddrPort().Addr(), time.Now())
}

// answer builds the response to req.
func (s *Server) answer(ctx context.Context, req *dns.Msg) *dns.Msg {
	resp := new(dns.Msg)
	switch {
	case req.Opcode != dns.OpcodeQuery:
		// NOTIFY, UPDATE and the rest: this server only answers queries.
		return resp.SetRcode(req, dns.RcodeNotImplemented)
	case len(req.Question) != 1 || req.Response:
		return resp.SetRcode(req, dns.RcodeFormatError)
	}
	resp.SetReply(req)
	if opt := req.IsEdns0(); opt != nil {
		resp.SetEdns0(ednsUDPSize, false)
		if opt.Version() != 0 {
			// RFC 6891 §6.1.3: only EDNS version 0 exists.
			resp.Rcode = dns.RcodeBadVers
			return resp
		}
	}

	q := req.Question[0]
	name := dns.CanonicalName(q.Name)
	// Zone transfers and meta types are refused for dev names too (by the
	// switch below, as names outside the zone): a CNAME is no answer to them.
	if s.isDevName(name) && (q.Qclass == dns.ClassINET || q.Qclass == dns.ClassANY) && !isTransferOrMeta(q.Qtype) {
		return s.answerDev(ctx, q, resp)
	}
	switch {
	case q.Qclass != dns.ClassINET && q.Qclass != dns.ClassANY,
		!dns.IsSubDomain(s.zone, name):
		// Not our zone: no referral, no recursion (RFC 2136 servers
		// answer REFUSED likewise).
		resp.Rcode = dns.RcodeRefused
		return resp
	case q.Qtype == dns.TypeAXFR || q.Qtype == dns.TypeIXFR:
		// Zone transfers would list every customer's selector.
		resp.Rcode = dns.RcodeRefused
		return resp
	case q.Qtype == dns.TypeOPT || q.Qtype == dns.TypeTSIG:
		// Meta types cannot be asked for (RFC 6895 §3.1).
		resp.Rcode = dns.RcodeFormatError
		return resp
	}
	resp.Authoritative = true

	if name == s.nameServer() && len(s.nsAddrs) > 0 {
		// The name server's own name holds only its addresses.
		resp.Answer = s.nameServerRecords(q.Qtype)
		if len(resp.Answer) == 0 {
			resp.Ns = append(resp.Ns, s.negativeSOA())
		}
		return resp
	}
	apex := name == s.zone
	var txt []string
	ttl := uint32(recordTTL)
	if !apex || q.Qtype == dns.TypeTXT || q.Qtype == dns.TypeANY {
		lookupCtx, cancel := context.WithTimeout(ctx, lookupTimeout)
		defer cancel()
		values, stale, err := s.lookups.txt(lookupCtx, strings.TrimSuffix(name, "."))
		if err != nil {
			// The name, never the values: they are keys of customers. A
			// look-up refused as one too many is not logged: in a flood
			// that would be a line per query.
			if !errors.Is(err, errBusy) {
				s.logger.Error("DNS look-up failed", "name", strings.TrimSuffix(name, "."), "type", dns.TypeToString[q.Qtype], "error", err)
			}
			resp.Authoritative = false
			resp.Rcode = dns.RcodeServerFailure
			return resp
		}
		txt = values
		if stale {
			ttl = staleAnswerTTL
		}
	}

	if apex {
		switch q.Qtype {
		case dns.TypeSOA:
			resp.Answer = append(resp.Answer, s.soa())
		case dns.TypeNS:
			resp.Answer = append(resp.Answer, s.ns())
		case dns.TypeANY:
			resp.Answer = append(resp.Answer, s.soa(), s.ns())
		}
	} else if len(txt) == 0 {
		resp.Rcode = dns.RcodeNameError
		resp.Ns = append(resp.Ns, s.negativeSOA())
		return resp
	}
	if q.Qtype == dns.TypeTXT || q.Qtype == dns.TypeANY {
		for _, value := range txt {
			resp.Answer = append(resp.Answer, txtRecord(name, value, ttl))
		}
	}
	if len(resp.Answer) == 0 {
		// NODATA: the name exists, not with this type (RFC 2308 §2.2).
		resp.Ns = append(resp.Ns, s.negativeSOA())
	}
	return resp
}

// isTransferOrMeta reports whether qtype asks for a zone transfer or is a
// meta type (RFC 6895 §3.1), which name no record.
func isTransferOrMeta(qtype uint16) bool {
	switch qtype {
	case dns.TypeAXFR, dns.TypeIXFR, dns.TypeOPT, dns.TypeTSIG:
		return true
	}
	return false
}

// limitSize truncates a UDP answer to what the client can receive (512
// bytes, or its EDNS buffer size up to ours), setting TC so that it asks
// again over TCP. A 4096-bit DKIM key does not fit 512 bytes.
func limitSize(resp, req *dns.Msg, w dns.ResponseWriter) {
	resp.Compress = true
	if _, isUDP := w.RemoteAddr().(*net.UDPAddr); !isUDP {
		resp.Truncate(dns.MaxMsgSize)
		return
	}
	size := dns.MinMsgSize
	if opt := req.IsEdns0(); opt != nil {
		size = max(dns.MinMsgSize, min(int(opt.UDPSize()), ednsUDPSize))
	}
	resp.Truncate(size)
}
