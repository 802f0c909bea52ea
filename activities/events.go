package activities

import (
	"context"
	"time"

	"github.com/mailyard/mailyard/internal/store"
)

// Platform event types about domains.
const (
	eventDomainVerified    = "domain.verified"
	eventDomainFailed      = "domain.failed"
	eventDomainDeleted     = "domain.deleted"
	eventDomainDKIMRotated = "domain.dkim_rotated"
)

// PlatformEvent is one platform event for an organization's webhooks. Key makes
// it happen once: emitting the same key again creates nothing new.
type PlatformEvent struct {
	Key            string
	Type           string
	OrganizationID int64
	OccurredAt     time.Time
	Data           map[string]any
}

// EventEmitter delivers platform events to the organization's subscribed
// webhooks through the webhook delivery pipeline.
type EventEmitter interface {
	EmitPlatformEvent(ctx context.Context, ev PlatformEvent) error
}

// announce emits a domain event with data {domain_id, domain, status} plus extra.
func (a *Domains) announce(ctx context.Context, d *store.Domain, eventType, key string, extra map[string]any) error {
	if a.Events == nil {
		return nil
	}
	status := d.Status
	if d.DeletedAt != nil {
		status = store.DomainDeleted
	}
	data := map[string]any{"domain_id": d.ID, "domain": d.Domain, "status": status}
	for k, v := range extra {
		data[k] = v
	}
	return a.Events.EmitPlatformEvent(ctx, PlatformEvent{Key: key, Type: eventType, OrganizationID: d.OrganizationID, OccurredAt: time.Now().UTC(), Data: data})
}
