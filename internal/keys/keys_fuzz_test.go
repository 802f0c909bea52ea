package keys

import (
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

// FuzzCheckAPIKey checks the API key format from both sides. For any
// presented string, CheckAPIKey accepts only "myk_" + 38 base62 characters
// whose last 6 are the checksum of the rest, and rejects everything else
// with ErrMalformedKey (never another error, never a panic). For any 32
// base62 characters, the key built from them is accepted, and every
// one-character substitution of its random part or checksum is rejected (the
// checksum catches typos without a database look-up).
func FuzzCheckAPIKey(f *testing.F) {
	good, err := NewAPIKey()
	if err != nil {
		f.Fatal(err)
	}
	for _, s := range []string{
		good, strings.ToUpper(good), good[:len(good)-1], good + "0", " " + good, good + "\n",
		"", "myk_", "myk_" + strings.Repeat("0", 38), "MYK_" + good[4:], "myk-" + good[4:],
		good[:10] + "\x00" + good[11:], good[:10] + "é" + good[12:], strings.Repeat("myk_", 11),
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, key string) {
		err := CheckAPIKey(key)
		if err != nil && err != ErrMalformedKey {
			t.Fatalf("CheckAPIKey(%q) = %v; want ErrMalformedKey or nil", key, err)
		}
		if err == nil {
			if len(key) != KeyLength || !strings.HasPrefix(key, KeyPrefix) {
				t.Fatalf("CheckAPIKey accepted %q: wrong length or prefix", key)
			}
			for i := len(KeyPrefix); i < len(key); i++ {
				if !strings.ContainsRune(base62, rune(key[i])) {
					t.Fatalf("CheckAPIKey accepted %q: byte %q is not base62", key, key[i])
				}
			}
			if body := key[:len(key)-checksumLength]; checksum(body) != key[len(body):] {
				t.Fatalf("CheckAPIKey accepted %q with a wrong checksum", key)
			}
		}

		// Whatever the fuzzer gave, make a well-formed key from it.
		random := make([]byte, randomLength)
		for i := range random {
			var b byte
			if i < len(key) {
				b = key[i]
			}
			random[i] = base62[(int(b)+i)%len(base62)]
		}
		built := KeyPrefix + string(random)
		built += checksum(built)
		if err := CheckAPIKey(built); err != nil {
			t.Fatalf("CheckAPIKey(%q) = %v for a key with a correct checksum", built, err)
		}
		for i := len(KeyPrefix); i < len(built); i++ {
			for _, c := range []byte{base62[0], base62[31], base62[61]} {
				if c == built[i] {
					continue
				}
				typo := built[:i] + string(c) + built[i+1:]
				if CheckAPIKey(typo) == nil {
					t.Fatalf("CheckAPIKey accepted %q, a typo of %q at position %d", typo, built, i)
				}
			}
		}
	})
}

// FuzzDKIMRecordPublicKey checks the parser of DKIM key records read back
// from DNS: a key it returns from a UTF-8 record is non-empty and free of
// whitespace and ';' (it is one tag value with folding removed), and a record made with
// DKIMRecord from such a key parses back to the same key.
func FuzzDKIMRecordPublicKey(f *testing.F) {
	for _, s := range []string{
		DKIMRecord("MIIBIjANBgkqhkiG9w0BAQEFAAOCAQ8AMIIBCgKCAQEA"),
		"v=DKIM1; k=rsa; p=", "v=DKIM1; p=abc def\r\n ghi==", "p=", "p", "=", ";;;", "",
		"v=DKIM1;k=rsa;p=AAAA;t=s", " p = a b ; p=second", "v=DKIM1; pp=x; p =y",
		"p=\x00\xff", "p=\xc2  \xa0", "p=\u00a0x\u2003y", "v=DKIM1; k=ed25519; p=11qYAYKxCrfVS/7TyWQHOg7hcvPapiMlrwIaaPcHURo=",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, value string) {
		p, ok := DKIMRecordPublicKey(value)
		if !ok {
			return
		}
		// Invalid UTF-8 can join into a space once folding removes what
		// separated its bytes ("\xc2 \xa0" gives U+00A0); such a value is
		// no base64 key either way, so the whitespace rule covers UTF-8.
		if !utf8.ValidString(value) {
			return
		}
		if p == "" || strings.ContainsRune(p, ';') || strings.IndexFunc(p, unicode.IsSpace) >= 0 {
			t.Fatalf("DKIMRecordPublicKey(%q) = %q: empty, or holds ';' or whitespace", value, p)
		}
		if again, ok := DKIMRecordPublicKey(DKIMRecord(p)); !ok || again != p {
			t.Fatalf("DKIMRecordPublicKey(DKIMRecord(%q)) = %q, %v; want the key back", p, again, ok)
		}
	})
}
