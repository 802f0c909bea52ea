package webhook

import (
	"compress/gzip"
	"io"
	"net/http"
	"strings"
)

// ResponseBodyLimit is how much of a response body is kept, measured after
// decompression.
const ResponseBodyLimit = 4 << 10

// maxCompressedRead bounds the bytes read off the wire while looking for
// ResponseBodyLimit decompressed bytes: a stream of empty gzip members
// would otherwise keep the reader busy without ever producing output.
const maxCompressedRead = 1 << 20

// readResponseBody keeps the first ResponseBodyLimit bytes of the body,
// inflating gzip itself so that a small compressed response cannot expand
// into gigabytes in memory. The body is informational: a read or
// decompression error keeps what was read so far and does not change the
// verdict.
func readResponseBody(resp *http.Response) (body []byte, truncated bool) {
	var r io.Reader = io.LimitReader(resp.Body, maxCompressedRead)
	if isGzip(resp.Header.Get("Content-Encoding")) {
		zr, err := gzip.NewReader(r)
		if err != nil {
			return nil, false
		}
		defer zr.Close()
		r = zr
	}
	body, _ = io.ReadAll(io.LimitReader(r, ResponseBodyLimit+1))
	if len(body) > ResponseBodyLimit {
		return body[:ResponseBodyLimit], true
	}
	return body, false
}

func isGzip(contentEncoding string) bool {
	ce := strings.ToLower(strings.TrimSpace(contentEncoding))
	return ce == "gzip" || ce == "x-gzip"
}
