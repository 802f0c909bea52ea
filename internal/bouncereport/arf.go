package bouncereport

import "strings"

// Feedback is the feedback report of an arf (RFC 5965 §3.1) and a few
// headers of the original message it includes.
type Feedback struct {
	// Type is the Feedback-Type, lower-cased: "abuse", "fraud",
	// "not-spam", "virus", "other", ... as written; telling them apart is
	// the caller's business.
	Type      string
	UserAgent string
	// OriginalRcptTo are the Original-Rcpt-To addresses without angle
	// brackets, as written: providers often redact them
	// ("xxxxxx@example.com"), so they may not be any recipient's.
	OriginalRcptTo []string
	// OriginalMailFrom is the Original-Mail-From address without angle
	// brackets: the envelope sender Mailyard used, a recipient's return path
	// bounces+<id>.<position>.<tag>@... (docs/inbound.md)
	OriginalMailFrom string
	// ArrivalDate and SourceIP are as written (white space normalised);
	// they are for people, so they are not parsed.
	ArrivalDate string
	SourceIP    string
	// OriginalReturnPath (without angle brackets), OriginalFrom and
	// OriginalTo are from the included original message's header, "" when
	// it has none; OriginalFrom and OriginalTo are as written.
	OriginalReturnPath string
	OriginalFrom       string
	OriginalTo         string
}

// parseFeedback parses the body of a message/feedback-report part, one
// header block.
func parseFeedback(b []byte) *Feedback {
	h := readHeader(b)
	f := &Feedback{
		Type:             strings.ToLower(clean(h.Get("Feedback-Type"))),
		UserAgent:        clean(h.Get("User-Agent")),
		OriginalMailFrom: stripAngles(h.Get("Original-Mail-From")),
		ArrivalDate:      clean(h.Get("Arrival-Date")),
		SourceIP:         clean(h.Get("Source-Ip")),
	}
	for _, v := range h.Values("Original-Rcpt-To") {
		if a := stripAngles(v); a != "" && len(f.OriginalRcptTo) < maxRecipients {
			f.OriginalRcptTo = append(f.OriginalRcptTo, a)
		}
	}
	return f
}
