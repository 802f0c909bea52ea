package dnspublish

import (
	"fmt"

	"github.com/miekg/dns"
)

// UpdateError is a dynamic update that the server answered with an error
// RCODE.
type UpdateError struct {
	Action    string // "publish" or "unpublish"
	Server    string
	Zone      string
	Rcode     int    // dns.RcodeRefused, dns.RcodeNotAuth, ...
	TSIGError uint16 // dns.RcodeBadSig, dns.RcodeBadKey, dns.RcodeBadTime or 0
}

func (e *UpdateError) Error() string {
	return fmt.Sprintf("%s DNS records: %s answered %s to the update of zone %s: %s",
		e.Action, e.Server, rcodeName(e.Rcode, e.TSIGError), e.Zone, e.hint())
}

// hint tells the operator what the RCODE usually means.
func (e *UpdateError) hint() string {
	switch e.TSIGError {
	case dns.RcodeBadSig:
		return "the TSIG signature did not verify; check the TSIG secret"
	case dns.RcodeBadKey:
		return "the server does not know the TSIG key; check its name and algorithm"
	case dns.RcodeBadTime:
		return "the TSIG time is outside the allowed skew; check the clocks"
	}
	switch e.Rcode {
	case dns.RcodeNotAuth:
		return "the server is not authoritative for the zone or did not accept the TSIG key"
	case dns.RcodeRefused:
		return "the server refused the update; check its allow-update or update-policy for this key"
	case dns.RcodeNotZone:
		return "a record name is outside the zone"
	case dns.RcodeServerFailure:
		return "the server failed to apply the update"
	case dns.RcodeNotImplemented:
		return "the server does not support dynamic updates"
	}
	return "the update was not applied"
}

func rcodeName(rcode int, tsigErr uint16) string {
	name := dns.RcodeToString[rcode]
	if name == "" {
		name = fmt.Sprintf("RCODE %d", rcode)
	}
	if tsigErr != 0 {
		if t := dns.RcodeToString[int(tsigErr)]; t != "" {
			return name + " (TSIG " + t + ")"
		}
	}
	return name
}
