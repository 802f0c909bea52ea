package mailmsg

import (
	"bytes"
	"crypto"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os/exec"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/emersion/go-msgauth/dkim"
)

const testSelector = "k3x9-1"

// testKey is one 2048-bit key for every signing test: generating it takes a
// noticeable fraction of a second, and python3-dkim's verifier sees it too.
var testKey = sync.OnceValue(func() *rsa.PrivateKey {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		panic(err)
	}
	return key
})

// dkimRecord is the TXT record a domain publishes for key.
func dkimRecord(t testing.TB, key *rsa.PrivateKey) string {
	t.Helper()
	spki, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	return "v=DKIM1; k=rsa; p=" + base64.StdEncoding.EncodeToString(spki)
}

// signedTestMessage builds and signs a message with list-unsubscribe headers
// and no Cc or Reply-To.
func signedTestMessage(t testing.TB) []byte {
	t.Helper()
	r := validRequest()
	r.To = []string{"Alice <alice@example.org>", "bob@example.net"}
	r.Bcc = []string{"hidden@example.net"}
	r.Subject = "Your receipt — №42"
	r.HTML = "<p>Thanks!</p>"
	r.Headers = map[string]string{
		"List-Unsubscribe":      "<https://example.com/u/1>",
		"List-Unsubscribe-Post": "List-Unsubscribe=One-Click",
		"X-Campaign":            "receipts",
	}
	raw := mustBuild(t, mustValidate(t, r))
	signed, err := Sign(raw, testDomain, testSelector, testKey())
	if err != nil {
		t.Fatalf("Sign: %v", err)
	}
	if !bytes.HasSuffix(signed, raw) || !bytes.HasPrefix(signed, []byte("DKIM-Signature: ")) {
		t.Fatal("Sign did not prepend one DKIM-Signature field to the message")
	}
	return signed
}

// goVerify verifies signed with go-msgauth, the key published at
// testSelector._domainkey.example.com.
func goVerify(t testing.TB, signed []byte) *dkim.Verification {
	t.Helper()
	record := dkimRecord(t, testKey())
	verifications, err := dkim.VerifyWithOptions(bytes.NewReader(signed), &dkim.VerifyOptions{
		LookupTXT: func(name string) ([]string, error) {
			if name != testSelector+"._domainkey."+testDomain {
				return nil, fmt.Errorf("unexpected lookup of %q", name)
			}
			return []string{record}, nil
		},
	})
	if err != nil {
		t.Fatalf("dkim.Verify: %v", err)
	}
	if len(verifications) != 1 {
		t.Fatalf("%d signatures, want 1", len(verifications))
	}
	return verifications[0]
}

// Tampering the signature must catch: each changes a signed part.
var tamperings = []struct {
	name   string
	tamper func(signed []byte) []byte
}{
	{"the body changed", func(s []byte) []byte { return bytes.Replace(s, []byte("Hi Alice"), []byte("Hi Mallory"), 1) }},
	{"a second From added", func(s []byte) []byte {
		return bytes.Replace(s, []byte("\r\nFrom: "), []byte("\r\nFrom: ceo@example.com\r\nFrom: "), 1)
	}},
	{"a Cc added", func(s []byte) []byte {
		return bytes.Replace(s, []byte("\r\nSubject: "), []byte("\r\nCc: spy@evil.example\r\nSubject: "), 1)
	}},
	// Fields the message has, added again above the signed ones, where many
	// readers would show them.
	{"a second Subject added", func(s []byte) []byte {
		return bytes.Replace(s, []byte("\r\nSubject: "), []byte("\r\nSubject: Password reset required\r\nSubject: "), 1)
	}},
	{"a second To added", func(s []byte) []byte {
		return bytes.Replace(s, []byte("\r\nTo: "), []byte("\r\nTo: victim@x.example\r\nTo: "), 1)
	}},
	{"the subject changed", func(s []byte) []byte { return bytes.Replace(s, []byte("Subject: "), []byte("Subject: Re: "), 1) }},
	{"the List-Unsubscribe target changed", func(s []byte) []byte {
		return bytes.Replace(s, []byte("https://example.com/u/1"), []byte("https://evil.example/u/1"), 1)
	}},
}

func TestSignVerifiesWithGoMsgauth(t *testing.T) {
	signed := signedTestMessage(t)
	v := goVerify(t, signed)
	if v.Err != nil {
		t.Fatalf("the signature does not verify: %v", v.Err)
	}
	if v.Domain != testDomain {
		t.Errorf("d= %q, want %q", v.Domain, testDomain)
	}
	wantKeys := []string{"From", "From", "To", "To", "Cc", "Subject", "Subject", "Date", "Date", "Message-ID", "Message-ID", "Reply-To",
		"MIME-Version", "MIME-Version", "Content-Type", "Content-Type", "List-Unsubscribe", "List-Unsubscribe", "List-Unsubscribe-Post", "List-Unsubscribe-Post"}
	if !reflect.DeepEqual(v.HeaderKeys, wantKeys) {
		t.Errorf("h= %q, want %q", v.HeaderKeys, wantKeys)
	}

	tags := signatureTags(t, signed)
	for tag, want := range map[string]string{"v": "1", "a": "rsa-sha256", "c": "relaxed/relaxed", "d": testDomain, "s": testSelector} {
		if tags[tag] != want {
			t.Errorf("%s=%q, want %q", tag, tags[tag], want)
		}
	}

	for _, tt := range tamperings {
		t.Run(tt.name, func(t *testing.T) {
			tampered := tt.tamper(signed)
			if bytes.Equal(tampered, signed) {
				t.Fatal("the tampering changed nothing")
			}
			if v := goVerify(t, tampered); v.Err == nil {
				t.Error("the tampered message still verifies")
			}
		})
	}
}

// signatureTags returns the tags of the DKIM-Signature field that starts
// signed, whitespace removed.
func signatureTags(t testing.TB, signed []byte) map[string]string {
	t.Helper()
	value := strings.TrimPrefix(rawHeader(signed, "DKIM-Signature")[0], " ")
	tags := map[string]string{}
	for _, tag := range strings.Split(value, ";") {
		name, v, _ := strings.Cut(tag, "=")
		tags[strings.TrimSpace(name)] = strings.Join(strings.Fields(v), "")
	}
	return tags
}

// pythonVerify is the verifier of Debian's python3-dkim (dkimpy), an
// implementation independent of go-msgauth. It reads a JSON list of base64
// messages on stdin (one process for all: starting Python is the slow part)
// and prints, per message, the DNS names it looked up and the verdict.
const pythonVerify = `
import base64, json, os, sys, dkim
for message in json.load(sys.stdin):
    looked_up = []
    def dnsfunc(name, timeout=5):
        looked_up.append(name.decode())
        return os.environb[b"DKIM_TXT"]
    ok = dkim.verify(base64.b64decode(message), dnsfunc=dnsfunc)
    print(",".join(looked_up), "pass" if ok else "fail")
`

// The system Python, not a pyenv or virtualenv one on PATH: python3-dkim is
// a Debian package.
const systemPython = "/usr/bin/python3"

func TestSignVerifiesWithPythonDKIM(t *testing.T) {
	if out, err := exec.Command(systemPython, "-c", "import dkim").CombinedOutput(); err != nil {
		t.Skipf("%s cannot import dkim (apt-get install python3-dkim; .ci/run does): %v %s", systemPython, err, out)
	}
	signed := signedTestMessage(t)
	messages := [][]byte{signed}
	for _, tt := range tamperings {
		messages = append(messages, tt.tamper(signed))
	}
	input, err := json.Marshal(messages) // []byte marshals as base64
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(systemPython, "-c", pythonVerify)
	cmd.Env = []string{"DKIM_TXT=" + dkimRecord(t, testKey())}
	cmd.Stdin = bytes.NewReader(input)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("python3-dkim: %v\n%s", err, stderr.Bytes())
	}
	verdicts := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(verdicts) != len(messages) {
		t.Fatalf("python3-dkim answered %q for %d messages", verdicts, len(messages))
	}
	lookup := testSelector + "._domainkey." + testDomain + "."
	if want := lookup + " pass"; verdicts[0] != want {
		t.Errorf("python3-dkim answered %q for the signed message, want %q", verdicts[0], want)
	}
	for i, tt := range tamperings {
		if want := lookup + " fail"; verdicts[i+1] != want {
			t.Errorf("python3-dkim answered %q when %s, want %q", verdicts[i+1], tt.name, want)
		}
	}
}

func TestSignRejects(t *testing.T) {
	raw := mustBuild(t, mustValidate(t, validRequest()))
	_, edKey, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		raw      []byte
		selector string
		key      crypto.Signer
	}{
		{"an Ed25519 key", raw, testSelector, edKey},
		{"no key", raw, testSelector, nil},
		{"no selector", raw, "", testKey()},
		{"no From", []byte("To: a@x.example\r\nSubject: s\r\n\r\nbody\r\n"), testSelector, testKey()},
		{"no header at all", []byte("just text"), testSelector, testKey()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if signed, err := Sign(tt.raw, testDomain, tt.selector, tt.key); err == nil {
				t.Errorf("Sign succeeded:\n%s", signed)
			}
		})
	}
}
