package apperr_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/mailyard/mailyard/internal/apperr"
)

func TestIsMatchesCodeAndResourceNotMessage(t *testing.T) {
	anyNotFound := &apperr.Error{Code: apperr.NotFound}
	domainNotFound := &apperr.Error{Code: apperr.NotFound, Resource: "domain"}
	err := fmt.Errorf("loading: %w", apperr.NotFoundf("domain"))

	if !errors.Is(err, anyNotFound) {
		t.Error("a wrapped domain not-found does not match the code-only sentinel")
	}
	if !errors.Is(err, domainNotFound) {
		t.Error("a wrapped domain not-found does not match the domain sentinel")
	}
	if errors.Is(apperr.NotFoundf("webhook"), domainNotFound) {
		t.Error("a webhook not-found matches the domain sentinel")
	}
	if errors.Is(err, &apperr.Error{Code: apperr.Conflict}) {
		t.Error("a not-found matches a conflict")
	}
	if errors.Is(errors.New("domain not found"), anyNotFound) {
		t.Error("an untyped error with the same text matches")
	}
}

func TestCodeAndMessage(t *testing.T) {
	e := apperr.Errorf(apperr.WebhookLimitReached, "webhook", "this organization already has %d webhooks", 20)
	if e.Code != apperr.WebhookLimitReached || e.Resource != "webhook" || e.Error() != "this organization already has 20 webhooks" {
		t.Fatalf("Errorf built %+v (%q)", e, e.Error())
	}
	if got := apperr.NotFoundf("delivery").Error(); got != "delivery not found" {
		t.Fatalf("NotFoundf says %q", got)
	}
	for _, c := range []struct {
		err  error
		want string
	}{
		{nil, ""},
		{e, apperr.WebhookLimitReached},
		{fmt.Errorf("create: %w", e), apperr.WebhookLimitReached},
		{errors.New("connection reset"), apperr.Internal},
	} {
		if got := apperr.Code(c.err); got != c.want {
			t.Errorf("Code(%v) = %q, want %q", c.err, got, c.want)
		}
	}
}
