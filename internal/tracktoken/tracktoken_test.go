package tracktoken

import (
	"bytes"
	"encoding/base32"
	"strings"
	"testing"

	"github.com/google/uuid"
)

func keys(t *testing.T, fill byte) *Keys {
	t.Helper()
	k, err := New(bytes.Repeat([]byte{fill}, 32))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestRoundTripAndShape(t *testing.T) {
	k := keys(t, 1)
	id := uuid.New()
	for _, want := range []Token{
		{Kind: Open, EmailID: id, Recipient: 49},
		{Kind: Click, EmailID: id, Recipient: 3, Link: 9999},
		{Kind: Unsubscribe, EmailID: id},
	} {
		s := k.MustMint(want)
		if len(s) > 64 || len(s) > MaxLen || strings.Trim(s, "abcdefghijklmnopqrstuvwxyz234567") != "" {
			t.Errorf("token %q: want at most 64 lower-case base32 characters", s)
		}
		if want.Kind != Click && len("unsubscribe+"+s) > 64 {
			t.Errorf("unsubscribe+%s does not fit a local part", s)
		}
		raw, err := base32.StdEncoding.WithPadding(base32.NoPadding).DecodeString(strings.ToUpper(s))
		if err != nil || bytes.Contains(raw, id[:]) || bytes.Contains(raw, id[:8]) || bytes.Contains(raw, id[8:]) {
			t.Errorf("token %q shows the email id (%v)", s, err)
		}
		got, err := k.Parse(want.Kind, s)
		if err != nil || got != want {
			t.Errorf("Parse(%q) = %+v, %v; want %+v", s, got, err, want)
		}
	}
}

// Every one-character change, cut or extension of a valid token, the token
// in upper case, of another kind, or under another key, is refused.
func TestEveryMutationIsRefused(t *testing.T) {
	k := keys(t, 1)
	tok := Token{Kind: Click, EmailID: uuid.New(), Recipient: 1, Link: 2}
	s := k.MustMint(tok)
	const alphabet = "abcdefghijklmnopqrstuvwxyz234567ABCDEFGHIJKLMNOPQRSTUVWXYZ018=-_.%"
	refused := 0
	for i := range len(s) {
		for _, c := range []byte(alphabet) {
			if c == s[i] {
				continue
			}
			m := s[:i] + string(c) + s[i+1:]
			if _, err := k.Parse(Click, m); err == nil {
				t.Fatalf("mutation %q of %q at %d was accepted", m, s, i)
			}
			refused++
		}
		if _, err := k.Parse(Click, s[:i]); err == nil {
			t.Fatalf("prefix %q accepted", s[:i])
		}
	}
	for _, m := range []string{s + "a", s + "=", strings.ToUpper(s), "", " " + s} {
		if _, err := k.Parse(Click, m); err == nil {
			t.Errorf("%q accepted", m)
		}
	}
	if _, err := k.Parse(Open, s); err == nil {
		t.Error("a click token was accepted as an open token")
	}
	if _, err := keys(t, 2).Parse(Click, s); err == nil {
		t.Error("a token minted under another key was accepted")
	}
	t.Logf("%d mutations refused", refused)
}

func TestMintRefusesOutOfRange(t *testing.T) {
	k := keys(t, 1)
	for _, tok := range []Token{{Kind: Open, Recipient: -1}, {Kind: Click, Link: 70000}, {Kind: 'x'}} {
		if _, err := k.Mint(tok); err == nil {
			t.Errorf("Mint(%+v) succeeded", tok)
		}
	}
}

func FuzzParse(f *testing.F) {
	k, _ := New(bytes.Repeat([]byte{1}, 32))
	f.Add(k.MustMint(Token{Kind: Open, EmailID: uuid.New()}))
	f.Add("aaaa")
	f.Fuzz(func(t *testing.T, s string) {
		for _, kind := range []Kind{Open, Click, Unsubscribe} {
			tok, err := k.Parse(kind, s)
			if err != nil {
				continue
			}
			// Whatever is accepted is exactly what would be minted.
			if again := k.MustMint(tok); again != s {
				t.Fatalf("accepted %q, which mints as %q", s, again)
			}
		}
	})
}
