package trackmime

import (
	"errors"
	"runtime"
	"strings"
	"testing"
)

// foldedMessage has a header field folded over 200,000 lines, which is never
// read, and a Content-Type folded over 100,000 blank continuation lines,
// which is: about 1.2 MiB of header in all.
func foldedMessage() string {
	return "X-Junk: a" + strings.Repeat("\r\n x", 200000) + "\r\n" +
		"Content-Type: text/plain;" + strings.Repeat("\r\n ", 100000) + "\r\n charset=utf-8\r\n" +
		"\r\n{{unsubscribe_url}}\r\n"
}

// allocated is the number of bytes f allocates on the heap.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// TestFoldedHeaderIsLinear: a header folded over many lines is read in time
// and memory linear in its size. Parsing that copied the value built so far
// for each continuation line allocated about 40 GB here.
func TestFoldedHeaderIsLinear(t *testing.T) {
	in := foldedMessage()
	var out []byte
	var err error
	n := allocated(func() { out, err = Rewrite([]byte(in), track) })
	if err != nil {
		t.Fatal(err)
	}
	if want := strings.Replace(in, "{{unsubscribe_url}}", unsubURL, 1); string(out) != want {
		t.Fatal("the header was not kept, or the body not rewritten")
	}
	// The copy of the input, the output and one unfolded Content-Type.
	if limit := uint64(4 * len(in)); n > limit {
		t.Errorf("%d bytes allocated for a %d-byte message, want at most %d", n, len(in), limit)
	}
}

func TestMaxFields(t *testing.T) {
	msg := func(fields int) []byte {
		return []byte(strings.Repeat("X: y\r\n", fields-1) + "Content-Type: text/plain\r\n\r\n{{unsubscribe_url}}")
	}
	if out, err := Rewrite(msg(MaxFields), track); err != nil || !strings.HasSuffix(string(out), unsubURL) {
		t.Errorf("%d fields: %v", MaxFields, err)
	}
	if _, err := Rewrite(msg(MaxFields+1), track); !errors.Is(err, ErrTooComplex) {
		t.Errorf("%d fields: got %v, want ErrTooComplex", MaxFields+1, err)
	}
}

func TestUnfold(t *testing.T) {
	h, err := parseHeader([]byte("Subject: a\r\n b\n\tc \r\nX: \r\n\r\nbody"))
	if err != nil {
		t.Fatal(err)
	}
	// A CR alone is no line break and stays; a field's last line break goes.
	if v, err := h.value("subject"); err != nil || v != "a b\tc" {
		t.Errorf("Subject %q, %v", v, err)
	}
	h, _ = parseHeader([]byte("Subject: a\rb\r\n c"))
	if v, _ := h.value("Subject"); v != "a\rb c" {
		t.Errorf("Subject %q", v)
	}
}

// TestHasField: the header is read as Rewrite reads it, whatever bytes its
// values have, and only the top-level header counts.
func TestHasField(t *testing.T) {
	tests := []struct {
		msg  string
		want bool
	}{
		{"List-Unsubscribe: <https://x.example/u>\r\n\r\nbody", true},
		{"list-unsubscribe : <https://x.example/u>\r\n\r\nbody", true},
		{"Subject: \x1b$B$3$s\x1b(B\r\nList-Unsubscribe:\r\n <mailto:u@x.example>\r\n\r\nbody", true},
		{"X(a): b\r\nList-Unsubscribe: <mailto:u@x.example>\r\nSubject: \xff\x00\r\n\r\nbody", true},
		{"List-Unsubscribe: <https://x.example/u>", true}, // no body
		{"List-Unsubscribe-Post: List-Unsubscribe=One-Click\r\n\r\nbody", false},
		{"X-List-Unsubscribe: <https://x.example/u>\r\nSubject: List-Unsubscribe: x\r\n\r\nbody", false},
		{"Subject: x\r\n List-Unsubscribe: <https://x.example/u>\r\n\r\nList-Unsubscribe: <https://x.example/u>\r\n", false},
		{"Content-Type: multipart/mixed; boundary=b\r\n\r\n--b\r\nList-Unsubscribe: <https://x.example/u>\r\n\r\nx\r\n--b--\r\n", false},
	}
	for _, tt := range tests {
		if got, err := HasField([]byte(tt.msg), "List-Unsubscribe"); err != nil || got != tt.want {
			t.Errorf("%q: got %v, %v, want %v", tt.msg, got, err, tt.want)
		}
	}
	if _, err := HasField([]byte("not a field\r\n\r\nbody"), "List-Unsubscribe"); !errors.Is(err, ErrMalformed) {
		t.Errorf("a malformed header: got %v", err)
	}
}

func BenchmarkFoldedHeader(b *testing.B) {
	in := []byte(foldedMessage())
	b.SetBytes(int64(len(in)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Rewrite(in, track); err != nil {
			b.Fatal(err)
		}
	}
}
