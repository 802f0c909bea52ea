package dnspublish

import (
	"context"
	"errors"
	"fmt"
)

// RecordStore keeps the TXT records that `mailyard dns` serves. The database
// layer implements it.
type RecordStore interface {
	// UpsertPublishedTXT sets the value of name, replacing any earlier one.
	UpsertPublishedTXT(ctx context.Context, name, value string) error
	// DeletePublishedTXT removes name; removing a missing name succeeds.
	DeletePublishedTXT(ctx context.Context, name string) error
}

// Embedded publishes into Mailyard's own database; `mailyard dns` answers
// for the DKIM zone from there, so a record is live as soon as it is stored.
type Embedded struct {
	store RecordStore
}

var _ Publisher = (*Embedded)(nil)

// NewEmbedded returns a publisher that writes to store.
func NewEmbedded(store RecordStore) *Embedded {
	return &Embedded{store: store}
}

// Publish stores every record. Names are stored lower-case without a
// trailing dot, the form in which the DNS server looks them up.
func (e *Embedded) Publish(ctx context.Context, records []Record) error {
	for _, r := range records {
		name, err := canonicalName(r.Name)
		if err != nil {
			return err
		}
		if err := e.store.UpsertPublishedTXT(ctx, name, r.Value); err != nil {
			return fmt.Errorf("store TXT record %s: %w", name, err)
		}
	}
	return nil
}

// Unpublish deletes every name. It goes on after a failure so that one
// stuck name does not keep the others published, and reports all failures.
func (e *Embedded) Unpublish(ctx context.Context, names []string) error {
	var errs []error
	for _, n := range names {
		name, err := canonicalName(n)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if err := e.store.DeletePublishedTXT(ctx, name); err != nil {
			errs = append(errs, fmt.Errorf("delete TXT record %s: %w", name, err))
		}
	}
	return errors.Join(errs...)
}
