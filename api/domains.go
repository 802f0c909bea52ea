package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/danielgtaylor/huma/v2"

	"github.com/mailyard/mailyard/internal/dkimname"
	"github.com/mailyard/mailyard/internal/domainname"
	"github.com/mailyard/mailyard/internal/keys"
	"github.com/mailyard/mailyard/internal/store"
	"github.com/mailyard/mailyard/internal/temporalclient"
	"github.com/mailyard/mailyard/internal/verification"
	"github.com/mailyard/mailyard/workflows/onboarding"
)

// Domain is a sending domain as lists show it.
type Domain struct {
	ID                int64     `json:"id" example:"1"`
	Domain            string    `json:"domain" example:"example.com"`
	MailFromSubdomain string    `json:"mailfrom_subdomain" example:"mail.example.com"`
	Status            string    `json:"status" enum:"pending,verified,failed"`
	CreatedAt         time.Time `json:"created_at"`
}

func domainFromStore(d store.Domain) Domain {
	return Domain{ID: d.ID, Domain: d.Domain, MailFromSubdomain: d.MailFromSubdomain, Status: d.Status, CreatedAt: d.CreatedAt.UTC()}
}

// DomainList is the data of List domains.
type DomainList struct {
	Domains []Domain `json:"domains"`
	PageInfo
}

// ListDomainsInput pages through the domains.
type ListDomainsInput struct {
	PageQuery
}

// DNSRecord is a record the customer creates at their DNS provider.
type DNSRecord struct {
	Purpose string `json:"purpose" enum:"DKIM CNAME 1,DKIM CNAME 2,SPF,MX (bounce routing),Tracking (CNAME)"`
	Type    string `json:"type" enum:"CNAME,TXT,MX"`
	Name    string `json:"name" example:"abc-1._domainkey.example.com"`
	Value   string `json:"value"`
}

// AddDomainInput is the body of Add domain.
type AddDomainInput struct {
	Body struct {
		Domain            string `json:"domain" minLength:"1" maxLength:"300" doc:"Root domain to send from; IDNs are accepted and stored in ASCII form." example:"example.com"`
		MailFromSubdomain string `json:"mailfrom_subdomain,omitempty" maxLength:"300" doc:"MAIL FROM (bounce) subdomain; default mail.{domain}." example:"mail.example.com"`
	}
}

// AddedDomain is data.domain of Add domain.
type AddedDomain struct {
	ID                int64     `json:"id"`
	Domain            string    `json:"domain"`
	Status            string    `json:"status" enum:"pending"`
	MailFromSubdomain string    `json:"mailfrom_subdomain"`
	CreatedAt         time.Time `json:"created_at"`
}

// AddDomainData is the data of Add domain.
type AddDomainData struct {
	Domain     AddedDomain `json:"domain"`
	DNSRecords []DNSRecord `json:"dns_records"`
}

// DomainIDInput addresses one domain.
type DomainIDInput struct {
	ID int64 `path:"id" doc:"Domain id."`
}

// DomainState is data.domain of Get DNS records and Verify.
type DomainState struct {
	ID                int64      `json:"id"`
	Domain            string     `json:"domain"`
	Status            string     `json:"status" enum:"pending,verified,failed"`
	MailFromSubdomain string     `json:"mailfrom_subdomain"`
	LastCheckedAt     *time.Time `json:"last_checked_at" nullable:"true"`
}

// CheckedRecord is a DNS record with the result of its last check.
type CheckedRecord struct {
	DNSRecord
	Status      string     `json:"status" enum:"verified,pending,mismatch" doc:"verified; pending = not found; mismatch = found with another value."`
	Observed    []string   `json:"observed" doc:"What DNS answered at the name."`
	CheckedAt   *time.Time `json:"checked_at" nullable:"true"`
	LookupError *string    `json:"lookup_error" nullable:"true" doc:"Set when the last look-up failed (timeout, SERVFAIL); the status is then the one before."`
}

// DNSRecordsData is the data of Get DNS records and Verify.
type DNSRecordsData struct {
	Domain     DomainState     `json:"domain"`
	DNSRecords []CheckedRecord `json:"dns_records"`
}

func (s *Server) registerDomains() {
	register(s, huma.Operation{
		OperationID: "list-domains", Method: http.MethodGet, Path: "/api/v1/domains",
		Summary: "List domains", Tags: []string{"Domains"},
		Description: "The pending, verified and failed domains of the key's organization, oldest first: all of them, or a page with limit and cursor.",
		Errors:      []int{http.StatusUnprocessableEntity},
	}, s.listDomains)
	register(s, huma.Operation{
		OperationID: "add-domain", Method: http.MethodPost, Path: "/api/v1/domains", DefaultStatus: http.StatusCreated,
		Summary: "Add domain", Tags: []string{"Domains"},
		Description: "Adds a sending domain and returns the four DNS records to create. DKIM keys are generated and published in the background; verification starts at once.",
		Errors:      []int{http.StatusConflict, http.StatusUnprocessableEntity, http.StatusBadRequest, http.StatusRequestEntityTooLarge},
	}, s.addDomain)
	register(s, huma.Operation{
		OperationID: "get-dns-records", Method: http.MethodGet, Path: "/api/v1/domains/{id}/dns-records",
		Summary: "Get DNS records", Tags: []string{"Domains"},
		Description: "The domain's four DNS records with the result of their last check.",
		Errors:      []int{http.StatusNotFound},
	}, s.getDNSRecords)
	register(s, huma.Operation{
		OperationID: "verify-domain", Method: http.MethodPost, Path: "/api/v1/domains/{id}/verify",
		Summary: "Verify domain", Tags: []string{"Domains"},
		Description: "Checks the four records now and answers with the result (within 10 s). On a failed domain it starts a new 72-hour verification window.",
		Errors:      []int{http.StatusNotFound},
	}, s.verifyDomain)
}

func (s *Server) listDomains(ctx context.Context, in *ListDomainsInput) (*Response[DomainList], error) {
	const list = "domains"
	page, err := storePage[int64](in.PageQuery, list, 0, nil)
	if err != nil {
		return nil, err
	}
	rows, more, err := s.store.ListDomains(ctx, principalFrom(ctx).OrganizationID, page)
	if err != nil {
		return nil, err
	}
	out := DomainList{Domains: make([]Domain, 0, len(rows))}
	for _, d := range rows {
		out.Domains = append(out.Domains, domainFromStore(d))
	}
	out.PageInfo, err = pageInfo(page, list, rows, more, func(d *store.Domain) int64 { return d.ID })
	return respond(out), err
}

func (s *Server) addDomain(ctx context.Context, in *AddDomainInput) (*Response[AddDomainData], error) {
	name, err := domainname.Normalize(in.Body.Domain)
	if err != nil {
		return nil, fieldError("body.domain", err.Error())
	}
	mailFrom := "mail." + name
	if in.Body.MailFromSubdomain != "" {
		if mailFrom, err = domainname.NormalizeMailFrom(in.Body.MailFromSubdomain, name); err != nil {
			return nil, fieldError("body.mailfrom_subdomain", err.Error())
		}
	}
	token, err := keys.RandomString(32, keys.LowerAlnum)
	if err != nil {
		return nil, err
	}
	d := &store.Domain{OrganizationID: principalFrom(ctx).OrganizationID, Domain: name, MailFromSubdomain: mailFrom, DKIMToken: token}
	records := s.customerRecords(token, name, mailFrom)
	// The records' names are the domain's with more in front (a DKIM
	// selector adds 46 characters): a name no DNS can hold would leave
	// the domain pending for its whole window, then failed.
	for _, r := range records {
		if n := len(strings.TrimSuffix(r.Name, ".")); n > domainname.MaxNameLength {
			return nil, fieldError("body.domain", fmt.Sprintf("too long: the record %s would be named with %d characters, and DNS names have at most %d", r.Purpose, n, domainname.MaxNameLength))
		}
	}
	answer := func() *Response[AddDomainData] {
		out := AddDomainData{
			Domain:     AddedDomain{ID: d.ID, Domain: d.Domain, Status: d.Status, MailFromSubdomain: d.MailFromSubdomain, CreatedAt: d.CreatedAt.UTC()},
			DNSRecords: make([]DNSRecord, len(records)),
		}
		for i, r := range records {
			out.DNSRecords[i] = DNSRecord{Purpose: r.Purpose, Type: r.Type, Name: r.Name, Value: r.Value}
		}
		return respond(out)
	}
	// With an Idempotency-Key the answer commits with the domain: a retry
	// after this process dies gets the same domain, whose onboarding the
	// sweep starts if this process could not (SweepUnstartedOnboarding).
	txCtx := s.answerInTx(ctx, http.StatusCreated, func() any { return answer().Body })
	if err := s.store.CreateDomain(txCtx, d, records); err != nil {
		return nil, err
	}
	if err := s.onboarding.Start(ctx, d); err != nil {
		// Without its workflow the domain would never be verified: take it
		// back (with the answer stored with it) so the client can simply retry.
		// But a start whose answer only was lost (a time-out) has a run,
		// which may already have published the domain's DKIM keys: taken
		// back, they would stay in the zone with nothing to remove them.
		// That domain is answered, as it would have been.
		undo := context.WithoutCancel(ctx)
		// The domain's id is new: any run under it is this start's.
		if exists, _, rerr := temporalclient.RunOf(undo, s.temporal, onboarding.WorkflowID(d.ID)); rerr == nil && exists {
			return answer(), nil
		}
		if delErr := errors.Join(s.store.DeleteDomain(undo, d.ID), s.undoAnswerInTx(undo)); delErr != nil {
			s.logger.ErrorContext(ctx, "removing a domain whose onboarding did not start", "domain_id", d.ID, "error", delErr)
		}
		return nil, err
	}
	return answer(), nil
}

// dkimRecord is the customer's CNAME for the key at position.
func dkimRecord(position int, token, domain, dkimHost string) store.DomainRecord {
	sel := dkimname.Selector(token, position)
	return store.DomainRecord{Position: position, Purpose: "DKIM CNAME " + strconv.Itoa(position), Type: verification.TypeCNAME,
		Name: dkimname.CustomerName(sel, domain), Value: dkimname.KeyName(sel, dkimHost)}
}

// customerRecords are the four records of the seed, in order.
func (s *Server) customerRecords(token, domain, mailFrom string) []store.DomainRecord {
	return []store.DomainRecord{
		dkimRecord(1, token, domain, s.cfg.DKIMHost),
		dkimRecord(2, token, domain, s.cfg.DKIMHost),
		{Position: 3, Purpose: "SPF", Type: verification.TypeTXT, Name: mailFrom, Value: "v=spf1 include:" + s.cfg.SPFHost + " ~all"},
		{Position: 4, Purpose: "MX (bounce routing)", Type: verification.TypeMX, Name: mailFrom, Value: strconv.Itoa(s.cfg.MXPriority) + " " + s.cfg.BounceHost},
	}
}

func (s *Server) getDNSRecords(ctx context.Context, in *DomainIDInput) (*Response[DNSRecordsData], error) {
	d, err := s.store.DomainInOrganization(ctx, principalFrom(ctx).OrganizationID, in.ID)
	if err != nil {
		return nil, err
	}
	return s.dnsRecordsResponse(ctx, d)
}

func (s *Server) verifyDomain(ctx context.Context, in *DomainIDInput) (*Response[DNSRecordsData], error) {
	d, err := s.store.DomainInOrganization(ctx, principalFrom(ctx).OrganizationID, in.ID)
	if err != nil {
		return nil, err
	}
	if err := s.onboarding.Verify(ctx, d); err != nil {
		return nil, err
	}
	// Read again: the answer shows what the check stored.
	if d, err = s.store.DomainByID(ctx, d.ID); err != nil {
		return nil, err
	}
	return s.dnsRecordsResponse(ctx, d)
}

func (s *Server) dnsRecordsResponse(ctx context.Context, d *store.Domain) (*Response[DNSRecordsData], error) {
	records, err := s.store.DomainRecords(ctx, d.ID)
	if err != nil {
		return nil, err
	}
	out := DNSRecordsData{
		Domain:     DomainState{ID: d.ID, Domain: d.Domain, Status: d.Status, MailFromSubdomain: d.MailFromSubdomain, LastCheckedAt: utc(d.LastCheckedAt)},
		DNSRecords: make([]CheckedRecord, len(records)),
	}
	for i, r := range records {
		observed := []string(r.Observed)
		if observed == nil {
			observed = []string{}
		}
		out.DNSRecords[i] = CheckedRecord{
			DNSRecord: DNSRecord{Purpose: r.Purpose, Type: r.Type, Name: r.Name, Value: r.Value},
			Status:    r.Status, Observed: observed, CheckedAt: utc(r.CheckedAt), LookupError: r.Error,
		}
	}
	return respond(out), nil
}

func utc(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}
