// Package verification checks a domain's four customer records in DNS, stores the
// results, and moves the domain to verified when all four are in place. The
// onboarding workflow's activity and the API's direct check (for a domain with no
// open onboarding run) share it, so both judge records the same way.
package verification

import (
	"context"
	"fmt"
	"time"

	"github.com/mailyard/mailyard/internal/dnscheck"
	"github.com/mailyard/mailyard/internal/metrics"
	"github.com/mailyard/mailyard/internal/store"
)

// Record types as stored in domain_records.
const (
	TypeCNAME = "CNAME"
	TypeTXT   = "TXT"
	TypeMX    = "MX"
)

// Verifier runs one round of checks.
type Verifier struct {
	Store   *store.Store
	Checker *dnscheck.Checker
	// SPFHost and BounceHost are what the SPF include and the MX must point at.
	SPFHost    string
	BounceHost string
}

// Outcome summarises a round: the domain's status afterwards and how many
// records were verified, failed to look up, and were checked.
type Outcome struct {
	Status       string
	Verified     int
	LookupFailed int
	Total        int
}

// Verify checks every record of the domain now.
func (v *Verifier) Verify(ctx context.Context, domainID int64) (Outcome, error) {
	records, err := v.Store.DomainRecords(ctx, domainID)
	if err != nil {
		return Outcome{}, err
	}
	if len(records) == 0 {
		return Outcome{}, fmt.Errorf("domain %d has no records: %w", domainID, store.ErrNotFound)
	}
	exps := make([]dnscheck.Expectation, len(records))
	for i, r := range records {
		exps[i] = v.expectation(r)
	}
	results := v.Checker.Check(ctx, exps)
	checks := make([]store.RecordCheck, len(records))
	out := Outcome{Total: len(records)}
	for i, res := range results {
		metrics.CountVerificationCheck(string(exps[i].Kind), string(res.Status))
		c := store.RecordCheck{Position: records[i].Position, Name: records[i].Name, Observed: res.Observed}
		switch res.Status {
		case dnscheck.StatusVerified:
			c.Status = store.RecordVerified
			out.Verified++
		case dnscheck.StatusMismatch:
			c.Status = store.RecordMismatch
		case dnscheck.StatusPending:
			c.Status = store.RecordPending
		default:
			// A failed look-up says nothing about the record: keep its status.
			c.Error = "lookup failed"
			if res.Err != nil {
				c.Error = res.Err.Error()
			}
			out.LookupFailed++
		}
		checks[i] = c
	}
	out.Status, err = v.Store.SaveChecks(ctx, domainID, checks, time.Now().UTC().Truncate(time.Microsecond))
	return out, err
}

func (v *Verifier) expectation(r store.DomainRecord) dnscheck.Expectation {
	switch r.Type {
	case TypeCNAME:
		return dnscheck.Expectation{Kind: dnscheck.KindCNAME, Name: r.Name, Want: r.Value}
	case TypeTXT:
		return dnscheck.Expectation{Kind: dnscheck.KindSPF, Name: r.Name, Want: v.SPFHost}
	default:
		return dnscheck.Expectation{Kind: dnscheck.KindMX, Name: r.Name, Want: v.BounceHost}
	}
}

// CheckTimeout bounds one round of look-ups, so Verify answers within 10 s.
const CheckTimeout = 5 * time.Second

// New builds a Verifier that asks resolver ("host:port"; empty: the system's).
func New(st *store.Store, resolver, spfHost, bounceHost string) (*Verifier, error) {
	checker, err := dnscheck.New(resolver, CheckTimeout)
	if err != nil {
		return nil, fmt.Errorf("DNS resolver: %w", err)
	}
	return &Verifier{Store: st, Checker: checker, SPFHost: spfHost, BounceHost: bounceHost}, nil
}
