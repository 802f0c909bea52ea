// Package trackmime applies a rewrite (click, open and unsubscribe tracking,
// see internal/trackhtml) to the text bodies of a complete RFC 5322 message,
// one copy per recipient, and leaves every other byte alone. It does no I/O.
//
// The message is either built by internal/mailmsg or submitted over SMTP by a
// customer, so it may be hostile or malformed. Re-serializing it with a MIME
// library would change bytes the customer (or a DKIM signature over them)
// relies on, so this package copies raw byte ranges: the top-level header,
// multipart preambles, boundary lines and epilogues, and every part it does
// not rewrite are kept byte for byte. A rewritten part keeps its header; only
// when its body no longer fits its Content-Transfer-Encoding (7bit, 8bit or
// binary with a line over 998 octets, or 8-bit data in 7bit) is that one
// field changed to quoted-printable.
//
// Multipart bodies are split on their boundary lines here (RFC 2046 §5.1.1)
// rather than with mime/multipart, which does not give the raw bytes back.
// Header fields are split here too (RFC 5322 §2.2), so that one parser both
// reads a field and knows its bytes; mime parses the field values.
//
// Rewritten: text/html and text/plain parts that are not attachments, at any
// depth of multipart/*, in an ASCII-compatible charset (so the rewrite sees
// "<a href" and "{{unsubscribe_url}}" as the bytes they are). Not rewritten:
// attachments, parts in other charsets (UTF-16, ISO-2022-JP, Shift_JIS...),
// parts in an unknown transfer encoding, anything inside message/*
// (a forwarded message is not the sender's to track), and anything inside
// multipart/signed or multipart/encrypted (a rewrite would break the
// signature, and encrypted text cannot be read).
//
// Anything this package cannot read with certainty (a missing boundary or
// closing boundary, bad base64, a malformed header, too deep, too many
// parts or header fields) is an error rather than a guess, so that no copy
// is made in which only some of the text was rewritten or, worse, the
// message was cut short. The caller then sends the message as it came,
// untracked, and logs why (docs/tracking.md).
package trackmime

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/quotedprintable"
	"strings"
)

// Limits on what one message may hold; beyond them Rewrite fails with
// ErrTooComplex. Real mail nests a handful of levels and has tens of parts,
// and tens of header fields in each (a few hundred at most). MaxFields, per
// header, bounds the memory of the field list, which a 10 MiB header of
// one-letter fields would otherwise make hundreds of MiB; continuation lines
// need no cap, as they only move the end of their field.
const (
	MaxDepth  = 16
	MaxParts  = 1000
	MaxFields = 10000
)

// maxLine is the longest line RFC 5322 §2.1.1 allows, without its CRLF.
const maxLine = 998

var (
	// ErrMalformed wraps the reasons a message cannot be read.
	ErrMalformed = errors.New("malformed MIME message")
	// ErrTooComplex is for messages past MaxDepth, MaxParts or MaxFields.
	ErrTooComplex = errors.New("MIME message too complex")
)

// Part describes a text body given to a Rewriter.
type Part struct {
	// HTML is true for text/html, false for text/plain.
	HTML bool
	// Charset is the part's charset parameter, lower-cased; "" means
	// us-ascii (RFC 2045 §5.2). It is one of those asciiCompatible allows.
	Charset string
}

// UTF8 reports whether the part declares UTF-8: only then do its non-ASCII
// bytes mean what they would in a URL or a database, and may a rewrite write
// non-ASCII characters into it. US-ASCII (or no charset) is not: it has no
// such bytes, and a mail reader shows any there as another charset's.
func (p Part) UTF8() bool {
	return p.Charset == "utf-8" || p.Charset == "utf8"
}

// Rewriter rewrites one decoded text body. Returning body unchanged keeps
// the part's bytes.
type Rewriter func(body []byte, part Part) ([]byte, error)

// Rewrite returns raw with fn applied to each text body it rewrites (see the
// package comment), in the order they appear.
func Rewrite(raw []byte, fn Rewriter) ([]byte, error) {
	w := walker{fn: fn}
	out := bytes.NewBuffer(make([]byte, 0, len(raw)+len(raw)/8))
	if err := w.entity(out, raw, 0, "text/plain"); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

// PrependFields returns raw with the given header fields, each "Name: value"
// without a line break, added at the top of its header. A field with a line
// break or without a name is refused, so that no value can add a field of
// its own.
func PrependFields(raw []byte, fields ...string) ([]byte, error) {
	n := len(raw)
	for _, f := range fields {
		name, _, ok := strings.Cut(f, ":")
		if !ok || !validName(name) || strings.ContainsAny(f, "\r\n") || len(f) > maxLine {
			return nil, fmt.Errorf("trackmime: bad header field %q", f)
		}
		n += len(f) + 2
	}
	out := make([]byte, 0, n)
	for _, f := range fields {
		out = append(out, f...)
		out = append(out, "\r\n"...)
	}
	return append(out, raw...), nil
}

type walker struct {
	fn    Rewriter
	parts int
	// dashes are "--" and the boundary of each enclosing multipart.
	dashes [][]byte
}

// entity writes one entity (a header, a blank line and a body) to out,
// rewritten. defaultType is its Content-Type if it has none (RFC 2046 §5.1:
// text/plain, message/rfc822 in multipart/digest).
func (w *walker) entity(out *bytes.Buffer, raw []byte, depth int, defaultType string) error {
	w.parts++
	if w.parts > MaxParts {
		return fmt.Errorf("%w: more than %d parts", ErrTooComplex, MaxParts)
	}
	if depth > MaxDepth {
		return fmt.Errorf("%w: nested deeper than %d", ErrTooComplex, MaxDepth)
	}
	h, err := parseHeader(raw)
	if err != nil {
		return err
	}
	ct, err := h.value("Content-Type")
	if err != nil {
		return err
	}
	mediaType, params := defaultType, map[string]string{}
	if ct != "" {
		if mediaType, params, err = mime.ParseMediaType(ct); err != nil {
			return fmt.Errorf("%w: Content-Type %q: %v", ErrMalformed, ct, err)
		}
	}
	switch {
	case mediaType == "multipart/signed" || mediaType == "multipart/encrypted":
		// S/MIME or OpenPGP (RFC 1847): the signature covers the parts'
		// bytes, and a rewrite would show every reader "altered".
		out.Write(raw)
		return nil
	case strings.HasPrefix(mediaType, "multipart/"):
		childType := "text/plain"
		if mediaType == "multipart/digest" {
			childType = "message/rfc822"
		}
		out.Write(raw[:h.bodyStart])
		return w.multipart(out, raw[h.bodyStart:], params["boundary"], depth, childType)
	case mediaType == "text/html" || mediaType == "text/plain":
		return w.text(out, raw, h, mediaType == "text/html", params["charset"])
	default:
		out.Write(raw)
		return nil
	}
}

// multipart writes a multipart body, rewriting each part and copying the
// preamble, the boundary lines and the epilogue.
func (w *walker) multipart(out *bytes.Buffer, body []byte, boundary string, depth int, childType string) error {
	if boundary == "" || len(boundary) > 70 {
		return fmt.Errorf("%w: multipart without a valid boundary", ErrMalformed)
	}
	dash := []byte("--" + boundary)
	w.dashes = append(w.dashes, dash)
	defer func() { w.dashes = w.dashes[:len(w.dashes)-1] }()
	copied := 0     // body[:copied] is written
	partStart := -1 // start of the current part, -1 before the first delimiter
	for pos := 0; pos < len(body); {
		next := len(body)
		if i := bytes.IndexByte(body[pos:], '\n'); i >= 0 {
			next = pos + i + 1
		}
		isDelim, closing := delimiter(trimEOL(body[pos:next]), dash)
		if !isDelim {
			pos = next
			continue
		}
		if partStart >= 0 {
			// The line break before a delimiter belongs to the delimiter.
			end := max(partStart, pos-eolBefore(body, pos))
			out.Write(body[copied:partStart])
			if err := w.entity(out, body[partStart:end], depth+1, childType); err != nil {
				return err
			}
			copied = end
		}
		if closing {
			out.Write(body[copied:])
			return nil
		}
		partStart = next
		pos = next
	}
	if partStart < 0 {
		return fmt.Errorf("%w: boundary %q not found", ErrMalformed, boundary)
	}
	return fmt.Errorf("%w: no closing boundary %q", ErrMalformed, boundary)
}

// delimiter says whether line (without its line break) is a boundary
// delimiter line for dash ("--" and the boundary), and whether it is the
// closing one: dash, then "--" if closing, then only spaces or tabs.
func delimiter(line, dash []byte) (ok, closing bool) {
	rest, ok := bytes.CutPrefix(line, dash)
	if !ok {
		return false, false
	}
	rest, closing = bytes.CutPrefix(rest, []byte("--"))
	if len(bytes.Trim(rest, " \t")) != 0 {
		return false, false // a line that only starts like the boundary
	}
	return true, closing
}

// text writes a text part, rewritten if it is one to rewrite.
func (w *walker) text(out *bytes.Buffer, raw []byte, h header, html bool, charset string) error {
	charset = strings.ToLower(strings.TrimSpace(charset)) // charset=" UTF-8 " is seen
	disp, err := h.value("Content-Disposition")
	if err != nil {
		return err
	}
	cte, err := h.value("Content-Transfer-Encoding")
	if err != nil {
		return err
	}
	dispType, _, _ := strings.Cut(disp, ";")
	if !h.hasBody || strings.EqualFold(strings.TrimSpace(dispType), "attachment") || !asciiCompatible(charset) {
		out.Write(raw)
		return nil
	}
	encoded := raw[h.bodyStart:]
	cte = strings.ToLower(strings.TrimSpace(cte))
	var body []byte
	switch cte {
	case "", "7bit", "8bit", "binary":
		body = encoded
	case "quoted-printable":
		if body, err = io.ReadAll(quotedprintable.NewReader(bytes.NewReader(encoded))); err != nil {
			return fmt.Errorf("%w: %v", ErrMalformed, err)
		}
	case "base64":
		if body, err = decodeBase64(encoded); err != nil {
			return err
		}
	default:
		out.Write(raw) // x-uuencode and the like: not ours to guess at
		return nil
	}
	rewritten, err := w.fn(body, Part{HTML: html, Charset: charset})
	if err != nil {
		return err
	}
	if bytes.Equal(rewritten, body) {
		out.Write(raw)
		return nil
	}
	start := out.Len()
	switch {
	case cte == "quoted-printable":
		out.Write(raw[:h.bodyStart])
		writeQP(out, rewritten)
	case cte == "base64":
		out.Write(raw[:h.bodyStart])
		writeBase64(out, rewritten, bytes.HasSuffix(encoded, []byte("\n")))
	case !fits(rewritten, cte != "8bit" && cte != "binary"):
		// A binary part too: Mailyard sends without BINARYMIME, so its
		// lines must fit RFC 5322's limit like 8bit ones.
		h.writeWithCTE(out, "quoted-printable")
		writeQP(out, rewritten)
	default:
		out.Write(raw[:h.bodyStart])
		out.Write(rewritten)
	}
	return w.checkNoDelimiter(out.Bytes()[start:])
}

// checkNoDelimiter fails if a rewritten part has a line that would end it
// (or an enclosing part) early: the rewrite must not change the structure.
func (w *walker) checkNoDelimiter(part []byte) error {
	for len(part) > 0 {
		var line []byte
		line, part = cutLine(part)
		for _, dash := range w.dashes {
			if ok, _ := delimiter(trimEOL(line), dash); ok {
				return fmt.Errorf("%w: a rewritten part contains the boundary line %q", ErrMalformed, dash)
			}
		}
	}
	return nil
}

// asciiCompatible says whether a charset writes ASCII as ASCII and uses no
// ASCII bytes for anything else, so that a byte-level rewrite is safe.
// Absent means us-ascii (RFC 2045 §5.2). c is lower-case and trimmed.
func asciiCompatible(c string) bool {
	switch {
	case c == "", c == "us-ascii", c == "ascii", c == "utf-8", c == "utf8",
		c == "koi8-r", c == "koi8-u", c == "euc-jp", c == "euc-kr", c == "gb2312":
		return true
	case strings.HasPrefix(c, "iso-8859-"), strings.HasPrefix(c, "windows-125"), strings.HasPrefix(c, "cp125"):
		return true
	}
	return false
}

// cutLine splits b after its first <LF>: the first line with its line
// break, and the rest (nil after the last line).
func cutLine(b []byte) (line, rest []byte) {
	if i := bytes.IndexByte(b, '\n'); i >= 0 {
		return b[:i+1], b[i+1:]
	}
	return b, nil
}

// fits says whether b can be sent as it is in 7bit (sevenBit) or 8bit: no
// line over maxLine octets and, for 7bit, no octet over 127.
func fits(b []byte, sevenBit bool) bool {
	for len(b) > 0 {
		var line []byte
		line, b = cutLine(b)
		if len(trimEOL(line)) > maxLine {
			return false
		}
		if sevenBit {
			for _, c := range line {
				if c >= 0x80 {
					return false
				}
			}
		}
	}
	return true
}

// writeQP writes b in quoted-printable with CRLF line breaks. A CR or LF
// alone is written as CRLF first: it is a line break in text all the same,
// and quotedprintable.Writer loses the LF of "\r=XX\n" (it takes it for the
// second half of the CR's CRLF).
func writeQP(out *bytes.Buffer, b []byte) {
	qw := quotedprintable.NewWriter(out)
	for len(b) > 0 {
		i := bytes.IndexAny(b, "\r\n")
		if i < 0 {
			_, _ = qw.Write(b) // a bytes.Buffer does not fail
			break
		}
		_, _ = qw.Write(b[:i])
		_, _ = qw.Write([]byte("\r\n"))
		if b[i] == '\r' && i+1 < len(b) && b[i+1] == '\n' {
			i++
		}
		b = b[i+1:]
	}
	_ = qw.Close()
}

// writeBase64 writes b in base64, 76 characters a line (RFC 2045 §6.8), with
// a final line break if the original had one.
func writeBase64(out *bytes.Buffer, b []byte, finalEOL bool) {
	s := base64.StdEncoding.EncodeToString(b)
	for len(s) > 76 {
		out.WriteString(s[:76])
		out.WriteString("\r\n")
		s = s[76:]
	}
	out.WriteString(s)
	if finalEOL {
		out.WriteString("\r\n")
	}
}

// decodeBase64 decodes a base64 body, ignoring the line breaks and spaces
// between its characters.
func decodeBase64(b []byte) ([]byte, error) {
	clean := make([]byte, 0, len(b))
	for _, c := range b {
		if c != '\r' && c != '\n' && c != ' ' && c != '\t' {
			clean = append(clean, c)
		}
	}
	out := make([]byte, base64.StdEncoding.DecodedLen(len(clean)))
	n, err := base64.StdEncoding.Decode(out, clean)
	if err != nil {
		return nil, fmt.Errorf("%w: base64: %v", ErrMalformed, err)
	}
	return out[:n], nil
}

// trimEOL returns line without its CRLF or LF. A CR alone is no line break.
func trimEOL(line []byte) []byte {
	if line, ok := bytes.CutSuffix(line, []byte("\n")); ok {
		return bytes.TrimSuffix(line, []byte("\r"))
	}
	return line
}

// eolBefore is the length of the line break ending just before pos: 2 for
// CRLF, 1 for LF, 0 at the start.
func eolBefore(b []byte, pos int) int {
	switch {
	case pos >= 2 && b[pos-2] == '\r' && b[pos-1] == '\n':
		return 2
	case pos >= 1 && b[pos-1] == '\n':
		return 1
	}
	return 0
}
