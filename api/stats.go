package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/danielgtaylor/huma/v2"

	"github.com/mailyard/mailyard/internal/store"
)

// StatsInput is the range, and optionally the domain, of Get statistics.
type StatsInput struct {
	Start    string `query:"start" required:"true" format:"date" example:"2026-11-01" doc:"First UTC day, YYYY-MM-DD."`
	End      string `query:"end" required:"true" format:"date" example:"2026-11-30" doc:"Last UTC day, YYYY-MM-DD, included; not before start, at most 90 days after it counting both ends."`
	DomainID int64  `query:"domain_id" minimum:"1" doc:"Only this sending domain of the organization. A key without admin is limited to its own sending domain whether or not this is given."`
}

// StatCounters are the counters of a day or of the range, each counting
// recipients (the store's definition, so a new counter is one edit there).
type StatCounters = store.StatCounts

// DayStats are one UTC day's counters.
type DayStats struct {
	Date string `json:"date" format:"date" example:"2026-11-23" doc:"The UTC day."`
	StatCounters
}

// StatsData is the data of Get statistics.
type StatsData struct {
	Stats  []DayStats   `json:"stats" doc:"One entry per UTC day of the range, in order; days without events count zero."`
	Totals StatCounters `json:"totals" doc:"The counters of the whole range."`
}

func (s *Server) registerStats() {
	register(s, huma.Operation{
		OperationID: "get-stats", Method: http.MethodGet, Path: "/api/v1/stats",
		Summary: "Get statistics", Tags: []string{"Statistics"},
		Description: fmt.Sprintf("Daily sending counters of the organization, or of one sending domain, for each UTC day from start to end (at most %d days): "+
			"the recipients counted as %s, and their totals. "+
			"Keys with stats or admin; a key without admin sees only its own sending domain (another domain_id answers 404).", store.MaxStatsDays, statCounterNames()),
		Errors:   []int{http.StatusNotFound, http.StatusUnprocessableEntity},
		Metadata: map[string]any{permissionMetadata: []string{PermissionStats, PermissionAdmin}},
	}, s.getStats)
}

func (s *Server) getStats(ctx context.Context, in *StatsInput) (*Response[StatsData], error) {
	// The schema checked both dates' format.
	start, err := time.Parse(time.DateOnly, in.Start)
	if err != nil {
		return nil, fieldError("query.start", "start must be a date, YYYY-MM-DD")
	}
	end, err := time.Parse(time.DateOnly, in.End)
	if err != nil {
		return nil, fieldError("query.end", "end must be a date, YYYY-MM-DD")
	}
	// Year 0000 parses, but PostgreSQL has no year 0.
	if start.Year() < 1 {
		return nil, fieldError("query.start", "start must be a date from the year 0001 on")
	}
	if end.Before(start) {
		return nil, fieldError("query.end", "end must not be before start")
	}
	if days := int(end.Sub(start).Hours()/24) + 1; days > store.MaxStatsDays {
		return nil, fieldError("query.end", fmt.Sprintf("the range holds %d days; at most %d, both ends included", days, store.MaxStatsDays))
	}
	domainID, err := s.statsDomain(ctx, in.DomainID)
	if err != nil {
		return nil, err
	}
	days, err := s.store.Stats(ctx, principalFrom(ctx).OrganizationID, domainID, start, end)
	if err != nil {
		return nil, err
	}
	out := StatsData{Stats: make([]DayStats, 0, len(days))}
	var totals store.StatCounts
	for _, d := range days {
		out.Stats = append(out.Stats, DayStats{Date: d.Day.Format(time.DateOnly), StatCounters: d.StatCounts})
		totals.Add(d.StatCounts)
	}
	out.Totals = totals
	return respond(out), nil
}

// statsDomain is the domain the statistics are limited to (nil: the whole
// organization). The scope of a key bounds send and stats, not admin
// (docs/credentials.md): a key without admin reads its own sending domain
// only, and a domain_id it does not own answers 404 exactly like a domain
// that does not exist, as every foreign id does.
func (s *Server) statsDomain(ctx context.Context, requested int64) (*int64, error) {
	p := principalFrom(ctx)
	if p.SendingDomainID != nil && !p.Permissions.Has(PermissionAdmin) {
		if requested != 0 && requested != *p.SendingDomainID {
			return nil, notFoundError("domain")
		}
		return p.SendingDomainID, nil
	}
	if requested == 0 {
		return nil, nil
	}
	if _, err := s.store.DomainInOrganization(ctx, p.OrganizationID, requested); errors.Is(err, store.ErrNotFound) {
		return nil, notFoundError("domain")
	} else if err != nil {
		return nil, err
	}
	return &requested, nil
}

// statCounterNames spells the counters for the operation's description.
func statCounterNames() string {
	names := store.StatCounters()
	s := make([]string, len(names))
	for i, n := range names {
		s[i] = string(n)
	}
	return strings.Join(s[:len(s)-1], ", ") + " and " + s[len(s)-1]
}
