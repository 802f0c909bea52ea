package dnspublish

import (
	"context"
	"fmt"
	"strings"
)

// Record is one TXT record to publish.
type Record struct {
	// Name is the fully qualified owner name without a trailing dot, such
	// as "abc-1.dkim.mailyard.test".
	Name string
	// Value is the logical TXT value, such as "v=DKIM1; k=rsa; p=...". It
	// may be longer than 255 bytes: publishers split it into several
	// character-strings of one record.
	Value string
}

// Publisher makes TXT records visible in DNS.
//
// Both methods are idempotent, so a workflow can retry them freely:
// publishing a record again is harmless, publishing a new value for a name
// replaces the old value, and unpublishing a name that is not published
// succeeds.
type Publisher interface {
	Publish(ctx context.Context, records []Record) error
	Unpublish(ctx context.Context, names []string) error
}

// canonicalName lower-cases a record name and drops a trailing dot, the form
// in which names are stored and compared.
func canonicalName(name string) (string, error) {
	canonical := strings.ToLower(strings.TrimSuffix(strings.TrimSpace(name), "."))
	if canonical == "" {
		return "", fmt.Errorf("record name %q is empty", name)
	}
	return canonical, nil
}
