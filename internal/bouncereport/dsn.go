package bouncereport

import (
	"bytes"
	"regexp"
	"strconv"
	"strings"
)

// DSNRecipient is one per-recipient block of a delivery status notification
// (RFC 3464 §2.3).
type DSNRecipient struct {
	// FinalRecipient and OriginalRecipient are addresses as written, without
	// the "rfc822;" type, angle brackets and white space. Compare them with
	// Matches, which ignores case. Either may be "".
	FinalRecipient    string
	OriginalRecipient string
	// Action is "failed", "delayed", "delivered", "relayed" or "expanded"
	// (lower-cased); "" when missing or anything else.
	Action string
	// Status is the enhanced status code (RFC 3463), such as "5.1.1"; ""
	// when missing or not of the form class.subject.detail.
	Status string
	// DiagnosticCode is the Diagnostic-Code field unfolded, its words joined
	// by single spaces, type included ("smtp; 550 5.1.1 ...").
	DiagnosticCode string
	// SMTPCode is the reply code of an "smtp" diagnostic, such as 550; 0
	// when the diagnostic is of another type or has no code.
	SMTPCode int
	// SMTPMessage is the reply text of an "smtp" diagnostic without the
	// reply code and without the enhanced status code that follows it (that
	// is in Status), with the lines of a multi-line reply joined by spaces
	// and their repeated "550-5.1.1" prefixes removed.
	SMTPMessage string
	// RemoteMTA is the Remote-MTA's name without its "dns;" type.
	RemoteMTA string
}

// Matches reports whether addr is the block's final or original recipient,
// ignoring case (local parts are case-sensitive in theory, never in practice).
func (d DSNRecipient) Matches(addr string) bool {
	addr = strings.TrimSpace(addr)
	return addr != "" && (strings.EqualFold(addr, d.FinalRecipient) || strings.EqualFold(addr, d.OriginalRecipient))
}

var (
	// enhancedCode is a Status value's code, at its start: a trailing
	// full stop or comma that some MTAs add ("4.4.7.") does not make a
	// temporary failure unreadable, and so taken for a permanent one.
	enhancedCode = regexp.MustCompile(`^[245]\.[0-9]{1,3}\.[0-9]{1,3}`)
	replyCode    = regexp.MustCompile(`^[2-5][0-9][0-9]$`)
	actions      = map[string]bool{"failed": true, "delayed": true, "delivered": true, "relayed": true, "expanded": true}
)

// parseDeliveryStatus parses the body of a message/delivery-status part:
// header blocks separated by blank lines, the per-message block first. Blocks
// naming a recipient are returned; the others (the per-message block) are
// not needed. Each block is parsed by readHeader.
func parseDeliveryStatus(b []byte) []DSNRecipient {
	var out []DSNRecipient
	for _, block := range blocks(b, maxBlocks) {
		h := readHeader(block)
		final, original := h.Get("Final-Recipient"), h.Get("Original-Recipient")
		if final == "" && original == "" {
			continue
		}
		d := DSNRecipient{FinalRecipient: address(final), OriginalRecipient: address(original)}
		_, d.RemoteMTA = typedValue(h.Get("Remote-Mta"))
		if action := strings.ToLower(firstWord(h.Get("Action"))); actions[action] {
			d.Action = action
		}
		d.Status = statusCode(firstWord(h.Get("Status")))
		if diag := clean(h.Get("Diagnostic-Code")); diag != "" {
			d.DiagnosticCode = diag
			kind, text := typedValue(diag)
			if kind == "smtp" || kind == "" {
				d.SMTPCode, d.SMTPMessage = smtpReply(text)
			}
		}
		out = append(out, d)
		if len(out) == maxRecipients {
			break
		}
	}
	return out
}

// blocks splits b at blank (or white-space-only) lines into at most limit
// non-empty blocks.
func blocks(b []byte, limit int) [][]byte {
	var out [][]byte
	start := -1
	for pos := 0; pos < len(b) && len(out) < limit; {
		end := bytes.IndexByte(b[pos:], '\n')
		if end < 0 {
			end = len(b)
		} else {
			end += pos + 1
		}
		blank := len(bytes.TrimSpace(b[pos:end])) == 0
		switch {
		case blank && start >= 0:
			out = append(out, b[start:pos])
			start = -1
		case !blank && start < 0:
			start = pos
		}
		pos = end
	}
	if start >= 0 && len(out) < limit {
		out = append(out, b[start:])
	}
	return out
}

func firstWord(v string) string {
	if f := strings.Fields(v); len(f) > 0 {
		return f[0]
	}
	return ""
}

// smtpReply splits an SMTP reply, "550 5.1.1 text" or a multi-line one
// unfolded into "550-5.1.1 line one 550-5.1.1 line two 550 5.1.1 end", into
// its code and its text. The prefixes of later lines are only recognised
// after a first "550-", the mark of a multi-line reply, so that a "550" in
// the text of a one-line reply stays.
func smtpReply(text string) (code int, message string) {
	words := strings.Fields(text)
	if len(words) == 0 {
		return 0, ""
	}
	first, _, multiLine := strings.Cut(words[0], "-")
	if !replyCode.MatchString(first) {
		return 0, clean(text)
	}
	code, _ = strconv.Atoi(first)
	var kept []string
	for i := 0; i < len(words); i++ {
		w := words[i]
		if i == 0 || multiLine {
			if rest, ok := replyPrefix(w, first); ok {
				// "550-5.1.1" or "550-text": keep what follows the prefix
				// unless it is the enhanced code; "550" alone: skip an
				// enhanced code in the next word.
				switch {
				case rest == "":
					if i+1 < len(words) && enhancedCode.MatchString(words[i+1]) {
						i++
					}
				case !enhancedCode.MatchString(rest):
					kept = append(kept, rest)
				}
				continue
			}
		}
		kept = append(kept, w)
	}
	return code, strings.Join(kept, " ")
}

// replyPrefix reports whether w starts an SMTP reply line with code, and
// what follows the "code-" in the same word.
func replyPrefix(w, code string) (rest string, ok bool) {
	if w == code {
		return "", true
	}
	if after, found := strings.CutPrefix(w, code+"-"); found {
		return after, true
	}
	return "", false
}

// statusCode is the enhanced status code a Status value starts with, "" if
// none: "4.4.7." gives 4.4.7, "5.1.1234" nothing (a code is not followed by
// a digit).
func statusCode(value string) string {
	code := enhancedCode.FindString(value)
	if rest := value[len(code):]; rest != "" && '0' <= rest[0] && rest[0] <= '9' {
		return ""
	}
	return code
}
