package trackmime

import (
	"bytes"
	"fmt"
	"strings"
)

// header is an entity's header: its fields, where they are in the entity's
// raw bytes, and where its body starts.
type header struct {
	// raw is the whole entity, header and body.
	raw    []byte
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

// field is where one field is in header.raw. Only offsets are kept: a value
// is unfolded when it is read, so a field folded over millions of lines
// costs one pass over its bytes rather than a copy of its value per line.
type field struct {
	start, end int // raw[start:end] is the field, folded lines and line breaks included
	nameEnd    int // raw[start:nameEnd] is the name, without spaces before the colon
	valueStart int // raw[valueStart:end] is the value, after the colon, still folded
}

// parseHeader splits the header of the entity raw into fields (RFC 5322
// §2.2: a field is a line "Name: value" and the lines after it that start
// with a space or tab). Line breaks are CRLF or LF.
func parseHeader(raw []byte) (header, error) {
	h := header{raw: raw}
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
			h.fields[len(h.fields)-1].end = next
		default:
			colon := bytes.IndexByte(line, ':')
			if colon < 0 {
				return header{}, fmt.Errorf("%w: header line %.40q", ErrMalformed, line)
			}
			name := bytes.TrimRight(line[:colon], " \t")
			if !validName(string(name)) {
				return header{}, fmt.Errorf("%w: header line %.40q", ErrMalformed, line)
			}
			if len(h.fields) == MaxFields {
				return header{}, fmt.Errorf("%w: more than %d header fields", ErrTooComplex, MaxFields)
			}
			h.fields = append(h.fields, field{start: pos, end: next, nameEnd: pos + len(name), valueStart: pos + colon + 1})
		}
		pos = next
	}
	h.end, h.bodyStart = len(raw), len(raw)
	return h, nil
}

// is says whether f is named name, in any case.
func (h header) is(f field, name string) bool {
	return strings.EqualFold(string(h.raw[f.start:f.nameEnd]), name)
}

// value returns the value of the field name, unfolded and trimmed, "" if
// there is none. A field that is there twice is an error: readers differ on
// which one counts, and the rewrite must read the part as the recipient's
// client will.
func (h header) value(name string) (string, error) {
	var found field
	n := 0
	for _, f := range h.fields {
		if h.is(f, name) {
			found = f
			n++
		}
	}
	switch {
	case n == 0:
		return "", nil
	case n > 1:
		return "", fmt.Errorf("%w: %s appears %d times", ErrMalformed, name, n)
	}
	return strings.TrimSpace(unfold(h.raw[found.valueStart:found.end])), nil
}

// unfold returns a folded value with its line breaks removed (RFC 5322
// §2.2.3), in one copy.
func unfold(b []byte) string {
	var s strings.Builder
	s.Grow(len(b))
	for len(b) > 0 {
		var line []byte
		line, b = cutLine(b)
		s.Write(trimEOL(line))
	}
	return s.String()
}

// HasField says whether the top-level header of the message msg has a field
// named name, in any case. It reads the header as Rewrite does, so it
// answers for any header Rewrite accepts, 8-bit and control bytes in values
// included (net/textproto refuses those, and other names than tokens).
func HasField(msg []byte, name string) (bool, error) {
	h, err := parseHeader(msg)
	if err != nil {
		return false, err
	}
	for _, f := range h.fields {
		if h.is(f, name) {
			return true, nil
		}
	}
	return false, nil
}

// writeWithCTE writes the header and its blank line with the
// Content-Transfer-Encoding field set to cte, replacing the one there is or
// adding one at the end.
func (h header) writeWithCTE(out *bytes.Buffer, cte string) {
	start, end := h.end, h.end
	for _, f := range h.fields {
		if h.is(f, "Content-Transfer-Encoding") {
			start, end = f.start, f.end
		}
	}
	out.Write(h.raw[:start])
	out.WriteString("Content-Transfer-Encoding: " + cte + "\r\n")
	out.Write(h.raw[end:h.bodyStart])
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
