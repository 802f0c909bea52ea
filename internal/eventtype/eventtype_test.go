package eventtype_test

import (
	"testing"

	"github.com/mailyard/mailyard/internal/eventtype"
)

func TestCatalogue(t *testing.T) {
	if got := len(eventtype.All()); got != 11 {
		t.Fatalf("catalogue has %d types", got)
	}
	for _, ty := range eventtype.Email() {
		if !ty.IsEmail() || !ty.Valid() {
			t.Fatalf("%s", ty)
		}
	}
	for _, ty := range eventtype.Platform() {
		if ty.IsEmail() || !ty.Valid() {
			t.Fatalf("%s", ty)
		}
	}
	if ty, err := eventtype.Parse("webhook.disabled"); err != nil || ty != eventtype.WebhookDisabled {
		t.Fatal(ty, err)
	}
	if _, err := eventtype.Parse("sent"); err == nil {
		t.Fatal("sent parsed")
	}
}
