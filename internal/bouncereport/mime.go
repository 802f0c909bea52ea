package bouncereport

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"io"
	"mime"
	"mime/multipart"
	"mime/quotedprintable"
	"net/mail"
	"net/textproto"
	"strings"

	"github.com/mailyard/mailyard/internal/textclean"
)

// decoded undoes a Content-Transfer-Encoding. multipart.Reader.NextPart
// already undoes quoted-printable (and removes the header), so for parts
// only base64 is left; the top-level body may be either. Other encodings
// (7bit, 8bit, binary, unknown ones) are read as they are.
func decoded(encoding string, r io.Reader) io.Reader {
	switch strings.ToLower(strings.TrimSpace(encoding)) {
	case "base64":
		return base64.NewDecoder(base64.StdEncoding, r)
	case "quoted-printable":
		return quotedprintable.NewReader(r)
	}
	return r
}

// readPart returns up to limit decoded bytes of a part. A decoding error or
// a truncated part ends it early: what was read before is still useful.
func readPart(p *multipart.Part, limit int64) []byte {
	b, _ := io.ReadAll(io.LimitReader(decoded(p.Header.Get("Content-Transfer-Encoding"), p), limit))
	return b
}

// readHeader parses one header block (up to the first blank line or the end
// of b) with net/textproto, which unfolds continuation lines and makes
// lookups case-insensitive. A malformed line ends the block: the fields
// before it are kept.
func readHeader(b []byte) textproto.MIMEHeader {
	// bufio's smallest buffer is 16 bytes; sizing it to the block keeps the
	// cost of many small blocks proportional to their bytes.
	size := max(len(b), 16)
	h, _ := textproto.NewReader(bufio.NewReaderSize(bytes.NewReader(b), size)).ReadMIMEHeader()
	if h == nil {
		h = textproto.MIMEHeader{}
	}
	return h
}

// clean joins a field value's words with single spaces, so that however a
// value was folded (or refolded) it reads the same. Every fact Parse returns
// passes through here and ends up stored: invalid UTF-8 and control
// characters (a NUL would make the write fail) become U+FFFD, and the value
// is cut to maxFieldBytes.
func clean(v string) string {
	return textclean.Line(strings.Join(strings.Fields(v), " "), maxFieldBytes)
}

// stripAngles returns a Message-ID or path without its angle brackets and
// surrounding white space, as written otherwise.
func stripAngles(v string) string {
	v = clean(v)
	if strings.HasPrefix(v, "<") {
		if end := strings.IndexByte(v, '>'); end > 0 {
			return strings.TrimSpace(v[1:end])
		}
		return strings.TrimSpace(v[1:])
	}
	return v
}

// typedValue splits a DSN field value "type; value" (RFC 3464 §2.1.2:
// address-type, diagnostic-type, mta-name-type) and returns the lower-cased
// type and the value. A value without a type is returned whole.
func typedValue(v string) (kind, value string) {
	v = clean(v)
	kind, value, found := strings.Cut(v, ";")
	if !found {
		return "", v
	}
	return strings.ToLower(strings.TrimSpace(kind)), strings.TrimSpace(value)
}

// address returns the address of a DSN or ARF address field: without its
// "rfc822;" type, angle brackets and white space, as written otherwise.
func address(v string) string {
	_, a := typedValue(v)
	return stripAngles(a)
}

// bodyText is the text a legacy bounce is searched in: the first text/plain
// part of a multipart message (not looking inside attached messages, which
// are the original, not the bounce), or the whole body of a text/plain or
// untyped one, decoded and at most maxTextBytes long.
func bodyText(h mail.Header, body io.Reader) []byte {
	contentType := h.Get("Content-Type")
	mediaType, params, _ := mime.ParseMediaType(contentType)
	switch {
	case strings.HasPrefix(mediaType, "multipart/") && params["boundary"] != "":
		parts := 0
		return firstPlain(body, params["boundary"], 1, &parts)
	case contentType == "" || mediaType == "" || mediaType == "text/plain" || strings.HasPrefix(mediaType, "multipart/"):
		// An unparseable type or a multipart without a boundary is read as
		// the plain text it most likely is.
		b, _ := io.ReadAll(io.LimitReader(decoded(h.Get("Content-Transfer-Encoding"), body), maxTextBytes))
		return b
	}
	return nil
}

// firstPlain returns the first text/plain part under a multipart body,
// entering nested multiparts up to maxDepth levels and examining at most
// maxParts parts in all (counted in *parts).
func firstPlain(body io.Reader, boundary string, depth int, parts *int) []byte {
	mr := multipart.NewReader(body, boundary)
	for *parts < maxParts {
		p, err := mr.NextPart()
		if err != nil {
			return nil
		}
		*parts++
		contentType := p.Header.Get("Content-Type")
		mediaType, params, _ := mime.ParseMediaType(contentType)
		switch {
		case contentType == "" || mediaType == "text/plain":
			return readPart(p, maxTextBytes)
		case strings.HasPrefix(mediaType, "multipart/") && params["boundary"] != "" && depth < maxDepth:
			if text := firstPlain(p, params["boundary"], depth+1, parts); text != nil {
				return text
			}
		}
	}
	return nil
}
