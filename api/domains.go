package api

import (
	"context"
	"net/http"
	"time"

	"github.com/danielgtaylor/huma/v2"

	"github.com/mailyard/mailyard/internal/store"
)

// Domain is a sending domain as the API shows it.
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
}

func (s *Server) registerDomains() {
	register(s, huma.Operation{
		OperationID: "list-domains", Method: http.MethodGet, Path: "/api/v1/domains",
		Summary: "List domains", Tags: []string{"Domains"},
		Description: "All pending, verified and failed domains of the key's organization.",
	}, s.listDomains)
}

func (s *Server) listDomains(ctx context.Context, _ *struct{}) (*Response[DomainList], error) {
	rows, err := s.store.ListDomains(ctx, principalFrom(ctx).OrganizationID)
	if err != nil {
		return nil, err
	}
	out := DomainList{Domains: make([]Domain, 0, len(rows))}
	for _, d := range rows {
		out.Domains = append(out.Domains, domainFromStore(d))
	}
	return respond(out), nil
}
