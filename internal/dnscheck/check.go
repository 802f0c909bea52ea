package dnscheck

import (
	"context"
	"sort"
	"strings"
	"sync"
)

// Kind is the kind of record an Expectation describes.
type Kind string

const (
	// KindCNAME: Name has a CNAME whose target is Want.
	KindCNAME Kind = "cname"
	// KindSPF: a TXT record at Name is an SPF record ("v=spf1 ...") with
	// the term "include:<Want>".
	KindSPF Kind = "spf"
	// KindMX: an MX record at Name points at the host Want.
	KindMX Kind = "mx"
)

// Expectation is one record the customer was asked to add.
type Expectation struct {
	Kind Kind
	Name string
	Want string
}

// Status is the outcome of checking one Expectation.
type Status string

const (
	StatusVerified Status = "verified"
	// StatusPending: nothing found yet (NXDOMAIN, or no record of the
	// kind), the usual state before the customer has added the record.
	StatusPending Status = "pending"
	// StatusMismatch: a record of the kind exists with another value.
	StatusMismatch Status = "mismatch"
	// StatusLookupFailed: DNS gave no usable answer; Result.Err says why.
	StatusLookupFailed Status = "lookup_failed"
)

// Result is the outcome of one Expectation.
type Result struct {
	Status Status
	// Observed is what DNS answered, sorted: CNAME targets without the
	// trailing dot, TXT values with their character-strings joined, MX
	// records as "<preference> <host>".
	Observed []string
	// Err is set when Status is StatusLookupFailed.
	Err error
}

// Check looks up all expectations in parallel and returns their results in
// the same order. It returns within the Checker's timeout, or earlier if ctx
// ends; unfinished look-ups are then StatusLookupFailed.
func (c *Checker) Check(ctx context.Context, expectations []Expectation) []Result {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()

	results := make([]Result, len(expectations))
	var wg sync.WaitGroup
	for i, e := range expectations {
		wg.Go(func() {
			results[i] = c.check(ctx, e)
		})
	}
	wg.Wait()
	return results
}

func (c *Checker) check(ctx context.Context, e Expectation) Result {
	var res Result
	switch e.Kind {
	case KindCNAME:
		res = c.checkCNAME(ctx, e)
	case KindSPF:
		res = c.checkSPF(ctx, e)
	case KindMX:
		res = c.checkMX(ctx, e)
	default:
		return Result{Status: StatusLookupFailed, Err: &unknownKindError{kind: e.Kind}}
	}
	sort.Strings(res.Observed)
	return res
}

// sameName compares DNS names the way DNS does: case-insensitively, and
// with or without the trailing dot of a fully qualified name.
func sameName(a, b string) bool {
	return strings.EqualFold(strings.TrimSuffix(a, "."), strings.TrimSuffix(b, "."))
}

type unknownKindError struct{ kind Kind }

func (e *unknownKindError) Error() string {
	return "unknown kind of DNS record " + string(e.kind)
}
