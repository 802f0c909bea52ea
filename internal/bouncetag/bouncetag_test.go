package bouncetag

import (
	"bytes"
	"regexp"
	"strconv"
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
	for addr, tagged := range map[string]bool{sender: true, strings.ToUpper(sender): true, Untagged(emailID, "mail.shop.example"): false} {
		rp, ok := tg.Parse(addr)
		if want := (ReturnPath{EmailID: emailID, Recipient: WholeEmail, Tagged: tagged}); !ok || rp != want {
			t.Errorf("Parse(%q) = %+v, %v; want %+v, true", addr, rp, ok, want)
		}
	}
}

// Each recipient's return path names the email and that recipient, and its
// tag is good for no other: a recipient who forges a report with its own
// return path can only report on itself.
func TestRecipientSender(t *testing.T) {
	tg := tagger(t, 1)
	email := tg.Sender(emailID, "mail.shop.example")
	form := regexp.MustCompile(`^bounces\+` + emailID + `\.(0|[1-9][0-9]{0,2})\.[a-z2-7]{8}@mail\.shop\.example$`)
	seen := map[string]bool{}
	for _, position := range []int{0, 1, 2, 10, 49, 999} {
		sender, ok := tg.RecipientSender(email, position)
		if !ok || !form.MatchString(sender) {
			t.Fatalf("RecipientSender(%d) = %q, %v", position, sender, ok)
		}
		rp, ok := tg.Parse(strings.ToUpper(sender))
		if want := (ReturnPath{EmailID: emailID, Recipient: position, Tagged: true}); !ok || rp != want {
			t.Fatalf("Parse(%q) = %+v, %v; want %+v", sender, rp, ok, want)
		}
		local, domain, _ := strings.Cut(sender, "@")
		tag := local[len(local)-tagLength:]
		if seen[tag] || tag == tg.Tag(emailID) {
			t.Fatalf("recipient %d's tag %q is another return path's", position, tag)
		}
		seen[tag] = true
		// The tag of one position does not stand for another, nor for the
		// email, nor does another spelling of the position pass.
		for _, other := range []string{
			"bounces+" + emailID + "." + strconv.Itoa(position+1) + "." + tag + "@" + domain,
			"bounces+" + emailID + "." + tag + "@" + domain,
			"bounces+" + emailID + ".0" + strconv.Itoa(position) + "." + tag + "@" + domain,
			"bounces+" + emailID + ".+" + strconv.Itoa(position) + "." + tag + "@" + domain,
			"bounces+" + emailID + "." + strconv.Itoa(position) + "." + tag + ".x@" + domain,
		} {
			if rp, ok := tg.Parse(other); ok {
				t.Errorf("Parse(%q) = %+v, true; want refused", other, rp)
			}
		}
	}
	for _, bad := range []struct {
		sender   string
		position int
	}{
		{Untagged(emailID, "mail.shop.example"), 0}, // emails from before tags keep one sender
		{email, -1},
		{email, 1000},
		{"bounces+x.y@z", 0},
	} {
		if sender, ok := tg.RecipientSender(bad.sender, bad.position); ok {
			t.Errorf("RecipientSender(%q, %d) = %q, true", bad.sender, bad.position, sender)
		}
	}
	if sender, _ := tg.RecipientSender(email, 0); strings.Contains(sender, tagger(t, 2).Tag(emailID)) {
		t.Fatal("the tag does not depend on the key")
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
		if rp, ok := tg.Parse(addr); ok {
			t.Errorf("Parse(%q) = %+v, true; want refused", addr, rp)
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
			if _, ok := tg.Parse(addr); ok {
				t.Fatalf("a changed tag %q was accepted", mut)
			}
		}
	}
}

func FuzzParse(f *testing.F) {
	tg, _ := New(bytes.Repeat([]byte{1}, 32))
	email := tg.Sender(emailID, "mail.shop.example")
	f.Add(email)
	recipient, _ := tg.RecipientSender(email, 7)
	f.Add(recipient)
	f.Add(Untagged(emailID, "m.example"))
	f.Add("bounces+x.y@z")
	f.Fuzz(func(t *testing.T, addr string) {
		rp, ok := tg.Parse(addr)
		if !ok {
			return
		}
		// Whatever is accepted is, up to case, the return path it names,
		// as Mailyard writes it.
		_, domain, _ := strings.Cut(addr, "@")
		want := Untagged(rp.EmailID, domain)
		switch {
		case rp.Recipient != WholeEmail:
			want, _ = tg.RecipientSender(tg.Sender(rp.EmailID, domain), rp.Recipient)
		case rp.Tagged:
			want = tg.Sender(rp.EmailID, domain)
		}
		if !strings.EqualFold(addr, want) {
			t.Fatalf("accepted %q as %+v", addr, rp)
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
