package activities

import (
	"context"
	"time"

	"github.com/mailyard/mailyard/internal/eventtype"
	"github.com/mailyard/mailyard/internal/platformevents"
	"github.com/mailyard/mailyard/internal/store"
)

// domainEventData is data of the domain.* events: {domain_id, domain, status},
// plus active_selector on rotation.
type domainEventData struct {
	DomainID       int64  `json:"domain_id"`
	Domain         string `json:"domain"`
	Status         string `json:"status"`
	ActiveSelector string `json:"active_selector,omitempty"`
}

// announce emits a domain event once per key.
func (a *Domains) announce(ctx context.Context, d *store.Domain, eventType eventtype.Type, key, activeSelector string) error {
	status := d.Status
	if d.DeletedAt != nil {
		status = store.DomainDeleted
	}
	return a.Events.Emit(ctx, platformevents.Event{
		Key: key, Type: eventType, OrganizationID: d.OrganizationID, OccurredAt: time.Now().UTC(),
		Data: domainEventData{DomainID: d.ID, Domain: d.Domain, Status: status, ActiveSelector: activeSelector},
	})
}
