package trackmime

import (
	"bytes"
	"fmt"
	"strings"
)

// header is an entity's header: its fields, where they are in the entity's
// raw bytes, and where its body starts.
type header struct {
	fields []field
	// end is where the fields end and the blank line starts.
	end int
	// bodyStart is where the body starts, after the blank line; the end of
	// the entity if it has no blank line.
	bodyStart int
	// hasBody is false for an entity without the blank line that ends the
	// header: there is then no body to rewrite (nothing written after the
	// fields would be read as a body).
	hasBody bool
}

type field struct {
	name       string
	start, end int    // raw[start:end] is the field, folded lines and line breaks included
	value      string // unfolded, without the name and colon
}

// parseHeader splits the header of the entity raw into fields (RFC 5322
// §2.2: a field is a line "Name: value" and the lines after it that start
// with a space or tab). Line breaks are CRLF or LF.
func parseHeader(raw []byte) (header, error) {
	var h header
	for pos := 0; pos < len(raw); {
		next := len(raw)
		if i := bytes.IndexByte(raw[pos:], '\n'); i >= 0 {
			next = pos + i + 1
		}
		line := trimEOL(raw[pos:next])
		switch {
		case len(line) == 0:
			h.end, h.bodyStart, h.hasBody = pos, next, true
			return h, nil
		case line[0] == ' ' || line[0] == '\t':
			if len(h.fields) == 0 {
				return header{}, fmt.Errorf("%w: header starts with a folded line", ErrMalformed)
			}
			f := &h.fields[len(h.fields)-1]
			f.end = next
			f.value += string(line)
		default:
			name, value, ok := strings.Cut(string(line), ":")
			name = strings.TrimRight(name, " \t")
			if !ok || !validName(name) {
				return header{}, fmt.Errorf("%w: header line %.40q", ErrMalformed, line)
			}
			h.fields = append(h.fields, field{name: name, start: pos, end: next, value: value})
		}
		pos = next
	}
	h.end, h.bodyStart = len(raw), len(raw)
	return h, nil
}

// value returns the value of the field name, "" if there is none. A field
// that is there twice is an error: readers differ on which one counts, and
// the rewrite must read the part as the recipient's client will.
func (h header) value(name string) (string, error) {
	var v string
	n := 0
	for _, f := range h.fields {
		if strings.EqualFold(f.name, name) {
			v = f.value
			n++
		}
	}
	if n > 1 {
		return "", fmt.Errorf("%w: %s appears %d times", ErrMalformed, name, n)
	}
	return strings.TrimSpace(v), nil
}

// writeWithCTE writes the header of raw and its blank line with the
// Content-Transfer-Encoding field set to cte, replacing the one there is or
// adding one at the end.
func (h header) writeWithCTE(out *bytes.Buffer, raw []byte, cte string) {
	start, end := h.end, h.end
	for _, f := range h.fields {
		if strings.EqualFold(f.name, "Content-Transfer-Encoding") {
			start, end = f.start, f.end
		}
	}
	out.Write(raw[:start])
	out.WriteString("Content-Transfer-Encoding: " + cte + "\r\n")
	out.Write(raw[end:h.bodyStart])
}

// validName says whether name is a field name: printable ASCII without a
// colon (RFC 5322 §3.6.8).
func validName(name string) bool {
	if name == "" {
		return false
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; c < '!' || c > '~' || c == ':' {
			return false
		}
	}
	return true
}
