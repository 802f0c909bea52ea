package trackmime

import (
	"bytes"
	"strings"
	"testing"
)

var fuzzSeeds = []string{
	"From: a@x.example\r\nTo: b@x.example\r\nSubject: hi\r\n\r\nHello {{unsubscribe_url}}\r\n",
	"Content-Type: multipart/alternative; boundary=\"b1\"\r\nMIME-Version: 1.0\r\n\r\npre\r\n--b1\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Transfer-Encoding: quoted-printable\r\n\r\nGr=C3=BC=C3=9Fe =\r\nsoft\r\n--b1\r\nContent-Type: text/html; charset=utf-8\r\nContent-Transfer-Encoding: base64\r\n\r\nPHA+aGk8L3A+\r\n--b1--\r\npost\r\n",
	"Content-Type: multipart/mixed; boundary=o\r\n\r\n--o\r\nContent-Type: multipart/alternative; boundary=i\r\n\r\n--i\r\nContent-Type: text/html\r\nContent-Transfer-Encoding: 7bit\r\n\r\n<a href=\"https://x.example/\">x</a>\r\n--i--\r\n--o\r\nContent-Type: text/html; name=a.html\r\nContent-Disposition: attachment\r\n\r\n<p>a</p>\r\n--o\r\nContent-Type: message/rfc822\r\n\r\nSubject: inner\r\n\r\nbody\r\n--o--\r\n",
	"Content-Type: multipart/digest; boundary=d\n\n--d\n\nSubject: x\n\nbody\n--d\nContent-Type: text/plain; charset=utf-16\n\nx\n--d--",
	"Content-Type: text/plain; charset=us-ascii\r\nContent-Transfer-Encoding: 8bit\r\n\r\n" + strings.Repeat("a", 998) + "\r\n",
	"Content-Type: multipart/mixed; boundary=b\r\n\r\n--b\r\n\r\n--b \r\n--bb\r\n--b--x\r\n--b-- \r\n",
}

// FuzzRewrite checks that for any input Rewrite does not panic; that when it
// succeeds, a rewrite that changes nothing gives the input back; and that a
// rewrite that appends "X" to every body gives a message that reads back
// with the same bodies, each with "X" appended.
func FuzzRewrite(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		before, err := collect(in)
		if err != nil {
			return
		}
		same, err := Rewrite(in, identity)
		if err != nil || !bytes.Equal(same, in) {
			t.Fatalf("identity: %v\nin:  %q\nout: %q", err, in, same)
		}
		out, err := Rewrite(in, func(body []byte, _ Part) ([]byte, error) {
			return append(body[:len(body):len(body)], 'X'), nil
		})
		if err != nil {
			if strings.Contains(err.Error(), "contains the boundary line") {
				return // the appended X completed a boundary line, and was refused
			}
			t.Fatal(err)
		}
		after, err := collect(out)
		if err != nil {
			t.Fatalf("output does not read back: %v\nin:  %q\nout: %q", err, in, out)
		}
		if len(after) != len(before) {
			t.Fatalf("%d bodies, then %d\nin:  %q\nout: %q", len(before), len(after), in, out)
		}
		for i := range before {
			// Quoted-printable writes every line break as CRLF.
			if want := lines(string(before[i]) + "X"); lines(string(after[i])) != want {
				t.Fatalf("body %d: got %q, want %q\nin:  %q\nout: %q", i, after[i], want, in, out)
			}
		}
	})
}

// collect returns the decoded bodies Rewrite hands to its Rewriter.
func collect(msg []byte) ([][]byte, error) {
	var bodies [][]byte
	_, err := Rewrite(msg, func(body []byte, _ Part) ([]byte, error) {
		bodies = append(bodies, bytes.Clone(body))
		return body, nil
	})
	return bodies, err
}

func lines(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "\r\n", "\n"), "\r", "\n")
}
