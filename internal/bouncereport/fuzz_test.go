package bouncereport

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

// testdataFiles are the samples in testdata, the fuzz targets' seeds.
func testdataFiles(f *testing.F) map[string][]byte {
	f.Helper()
	entries, err := os.ReadDir("testdata")
	if err != nil {
		f.Fatal(err)
	}
	files := map[string][]byte{}
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".eml") {
			b, err := os.ReadFile(filepath.Join("testdata", e.Name()))
			if err != nil {
				f.Fatal(err)
			}
			files[e.Name()] = b
		}
	}
	return files
}

// FuzzParse checks that parse (Parse without its recover) never panics and
// that what it returns respects the package's limits and promises.
func FuzzParse(f *testing.F) {
	for _, b := range testdataFiles(f) {
		f.Add(b, true, false)
		f.Add(crlf(b), false, true)
	}
	f.Add(manyParts(120), true, false)
	f.Fuzz(func(t *testing.T, raw []byte, nullSender, unsubscribe bool) {
		r := parse(raw, Envelope{NullSender: nullSender, Unsubscribe: unsubscribe})
		switch r.Kind {
		case KindDSN:
			if len(r.Recipients) == 0 {
				t.Fatal("a dsn without recipients")
			}
		case KindARF:
			if r.Feedback == nil {
				t.Fatal("an arf without feedback")
			}
		case KindLegacyBounce:
			if !nullSender || len(r.Legacy) == 0 {
				t.Fatal("a legacy bounce not from the null sender or without findings")
			}
		case KindUnsubscribe:
			if !unsubscribe || nullSender {
				t.Fatal("unsubscribe without the envelope saying so, or from the null sender")
			}
		case KindAutoReply, KindUnrecognized:
		default:
			t.Fatalf("unknown kind %q", r.Kind)
		}
		if r.Kind != KindDSN && r.Recipients != nil || r.Kind != KindARF && r.Feedback != nil ||
			r.Kind != KindLegacyBounce && r.Legacy != nil {
			t.Fatalf("facts of another kind in a %s: %+v", r.Kind, r)
		}
		if len(r.Recipients) > maxRecipients || len(r.Legacy) > maxRecipients ||
			r.Feedback != nil && len(r.Feedback.OriginalRcptTo) > maxRecipients {
			t.Fatal("more than maxRecipients")
		}
		for _, d := range r.Recipients {
			if d.Status != "" && !enhancedCode.MatchString(d.Status) || d.Action != "" && !actions[d.Action] {
				t.Fatalf("unvalidated status or action: %+v", d)
			}
			if d.SMTPCode != 0 && (d.SMTPCode < 200 || d.SMTPCode > 599) {
				t.Fatalf("reply code %d", d.SMTPCode)
			}
		}
		for _, l := range r.Legacy {
			if !utf8.ValidString(l.Context) || len(l.Context) > maxContext+2 || !strings.HasPrefix(l.Status, "5.") {
				t.Fatalf("bad finding %+v", l)
			}
		}
		if bad := unstorable(r); bad != "" {
			t.Fatalf("unstorable fact %q", bad)
		}
		// Parse is deterministic: the report is the same the second time.
		if again := parse(raw, Envelope{NullSender: nullSender, Unsubscribe: unsubscribe}); !equalReports(r, again) {
			t.Fatal("two parses differ")
		}
	})
}

// FuzzRefold checks that a valid report's kind and facts do not change when
// its header fields (the message's, its parts', and the fields of its
// delivery-status and feedback-report blocks) are refolded or their names
// change case, as relays and mailbox providers do.
func FuzzRefold(f *testing.F) {
	files := testdataFiles(f)
	var names []string
	for name, b := range files {
		if r := parse(b, bounce); r.Kind == KindDSN || r.Kind == KindARF {
			names = append(names, name)
		}
	}
	for i := range names {
		f.Add(uint8(i), []byte{0x05, 0x12, 0x27, 0xff}, false)
		f.Add(uint8(i), []byte{0x01, 0x02, 0x03}, true)
	}
	f.Fuzz(func(t *testing.T, file uint8, ops []byte, useCRLF bool) {
		if len(names) == 0 || len(ops) == 0 {
			return
		}
		// The map's order varies from run to run; sort for reproducible inputs.
		slices.Sort(names)
		raw := files[names[int(file)%len(names)]]
		if useCRLF {
			raw = crlf(raw)
		}
		want := parse(raw, bounce)
		changed := refold(raw, ops)
		got := parse(changed, bounce)
		if !equalReports(want, got) {
			t.Fatalf("refolded\n%s\nwant %+v\ngot  %+v", changed, want, got)
		}
	})
}

// headerLine is a line that starts a header field.
var headerLine = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9-]*:`)

// refold changes every header-field line using the next op byte: its low
// two bits change the name's case (kept, upper, lower, alternating), the
// rest picks a white-space character of the value, followed by a
// non-space, to turn into a fold (none when it is 0).
func refold(raw []byte, ops []byte) []byte {
	eol := "\n"
	if bytes.Contains(raw, []byte("\r\n")) {
		eol = "\r\n"
	}
	var out bytes.Buffer
	n := 0
	for line := range bytes.Lines(raw) {
		body := bytes.TrimRight(line, "\r\n")
		loc := headerLine.FindIndex(body)
		if loc == nil {
			out.Write(line)
			continue
		}
		op := ops[n%len(ops)]
		n++
		name, value := string(body[:loc[1]-1]), string(body[loc[1]-1:])
		switch op & 3 {
		case 1:
			name = strings.ToUpper(name)
		case 2:
			name = strings.ToLower(name)
		case 3:
			var b strings.Builder
			for i, c := range name {
				if i%2 == 0 {
					b.WriteString(strings.ToUpper(string(c)))
				} else {
					b.WriteString(strings.ToLower(string(c)))
				}
			}
			name = b.String()
		}
		if k := int(op >> 2); k > 0 {
			seen := 0
			for i := 1; i+1 < len(value); i++ {
				if (value[i] == ' ' || value[i] == '\t') && value[i+1] != ' ' && value[i+1] != '\t' {
					if seen++; seen == k {
						value = value[:i] + eol + value[i:]
						break
					}
				}
			}
		}
		out.WriteString(name + value + string(line[len(body):]))
	}
	return out.Bytes()
}

// equalReports compares two reports' kinds and facts.
func equalReports(a, b *Report) bool { return reflect.DeepEqual(a, b) }

// unstorable returns a fact of r that could not be stored as text (invalid
// UTF-8, a control character such as NUL) or is longer than maxFieldBytes,
// or "" when there is none.
func unstorable(r *Report) string {
	facts := []string{r.MessageID, r.OriginalMessageID}
	for _, d := range r.Recipients {
		facts = append(facts, d.FinalRecipient, d.OriginalRecipient, d.DiagnosticCode, d.SMTPMessage, d.RemoteMTA)
	}
	if f := r.Feedback; f != nil {
		facts = append(facts, f.Type, f.UserAgent, f.OriginalMailFrom, f.ArrivalDate, f.SourceIP, f.OriginalReturnPath, f.OriginalFrom, f.OriginalTo)
		facts = append(facts, f.OriginalRcptTo...)
	}
	for _, l := range r.Legacy {
		facts = append(facts, l.Address, l.Context)
	}
	for _, s := range facts {
		if !utf8.ValidString(s) || strings.IndexFunc(s, unicode.IsControl) >= 0 || len(s) > maxFieldBytes {
			return s
		}
	}
	return ""
}
