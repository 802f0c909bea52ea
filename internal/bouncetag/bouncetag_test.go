package bouncetag

import (
	"bytes"
	"regexp"
	"strings"
	"testing"
)

const emailID = "0193a7c2-5b1e-7c3d-9f00-123456789abc"

func tagger(t *testing.T, b byte) *Tagger {
	t.Helper()
	tg, err := New(bytes.Repeat([]byte{b}, 32))
	if err != nil {
		t.Fatal(err)
	}
	return tg
}

func TestSenderRoundTrip(t *testing.T) {
	tg := tagger(t, 1)
	sender := tg.Sender(emailID, "mail.shop.example")
	if !regexp.MustCompile(`^bounces\+` + emailID + `\.[a-z2-7]{8}@mail\.shop\.example$`).MatchString(sender) {
		t.Fatalf("sender %q does not have the documented form", sender)
	}
	for _, addr := range []string{sender, strings.ToUpper(sender), Untagged(emailID, "mail.shop.example")} {
		id, ok := tg.EmailID(addr)
		if !ok || id != emailID {
			t.Errorf("EmailID(%q) = %q, %v; want %q, true", addr, id, ok, emailID)
		}
	}
}

func TestEmailIDRefusesForgedAndMalformedAddresses(t *testing.T) {
	tg := tagger(t, 1)
	good := tg.Sender(emailID, "mail.shop.example")
	local, domain, _ := strings.Cut(good, "@")
	tag := local[len(local)-tagLength:]
	other := tagger(t, 2).Sender(emailID, "mail.shop.example")
	forged := []string{
		other, // another installation's key
		local[:len(local)-tagLength] + "aaaaaaaa@" + domain,
		local[:len(local)-1] + "@" + domain,                                  // short tag
		local + "a@" + domain,                                                // long tag
		"bounces+0193a7c2-5b1e-7c3d-9f00-123456789abd." + tag + "@" + domain, // tag of another email
		"bounces+not-a-uuid." + tag + "@" + domain,
		"bounces+@" + domain,
		"postmaster@" + domain,
		"fbl@" + domain,
		"bounces+" + emailID,
		"",
	}
	for _, addr := range forged {
		if id, ok := tg.EmailID(addr); ok {
			t.Errorf("EmailID(%q) = %q, true; want refused", addr, id)
		}
	}
	// Every single-character change of the tag is refused.
	for i := 0; i < tagLength; i++ {
		for _, c := range "abcdefghijklmnopqrstuvwxyz234567" {
			if byte(c) == tag[i] {
				continue
			}
			mut := []byte(tag)
			mut[i] = byte(c)
			addr := "bounces+" + emailID + "." + string(mut) + "@" + domain
			if _, ok := tg.EmailID(addr); ok {
				t.Fatalf("a changed tag %q was accepted", mut)
			}
		}
	}
}

func FuzzEmailID(f *testing.F) {
	tg, _ := New(bytes.Repeat([]byte{1}, 32))
	f.Add(tg.Sender(emailID, "mail.shop.example"))
	f.Add(Untagged(emailID, "m.example"))
	f.Add("bounces+x.y@z")
	f.Fuzz(func(t *testing.T, addr string) {
		id, ok := tg.EmailID(addr)
		if !ok {
			return
		}
		// Whatever is accepted names an email whose tagged or untagged
		// sender is the address, up to case.
		_, domain, _ := strings.Cut(addr, "@")
		if !strings.EqualFold(addr, tg.Sender(id, domain)) && !strings.EqualFold(addr, Untagged(id, domain)) {
			t.Fatalf("accepted %q for %q", addr, id)
		}
	})
}

func TestUnsubscribeAddressAndToken(t *testing.T) {
	addr := UnsubscribeAddress("abc234", "bounces.example")
	if addr != "unsubscribe+abc234@bounces.example" {
		t.Fatal(addr)
	}
	for in, want := range map[string]string{
		addr: "abc234", "UNSUBSCRIBE+ABC234@Bounces.Example": "abc234", "unsubscribe+abc234": "abc234",
	} {
		if got, ok := UnsubscribeToken(in); !ok || got != want {
			t.Errorf("UnsubscribeToken(%q) = %q, %v", in, got, ok)
		}
	}
	for _, in := range []string{"unsubscribe+@bounces.example", "fbl@bounces.example", "unsubscribe@x", ""} {
		if got, ok := UnsubscribeToken(in); ok {
			t.Errorf("UnsubscribeToken(%q) = %q, true", in, got)
		}
	}
}
