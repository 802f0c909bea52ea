package dnspublish

import (
	"context"
	"errors"
	"maps"
	"strings"
	"testing"
)

// memoryStore is an in-memory RecordStore.
type memoryStore struct {
	records map[string]string
	failOn  string // a name whose write fails
}

func newMemoryStore() *memoryStore { return &memoryStore{records: map[string]string{}} }

func (s *memoryStore) UpsertPublishedTXT(_ context.Context, name, value string) error {
	if name == s.failOn {
		return errors.New("database is down")
	}
	s.records[name] = value
	return nil
}

func (s *memoryStore) DeletePublishedTXT(_ context.Context, name string) error {
	if name == s.failOn {
		return errors.New("database is down")
	}
	delete(s.records, name)
	return nil
}

func TestEmbeddedPublishAndUnpublish(t *testing.T) {
	ctx := context.Background()
	store := newMemoryStore()
	var pub Publisher = NewEmbedded(store)

	if err := pub.Publish(ctx, []Record{
		{Name: "ABC-1.dkim.mailyard.test.", Value: "v=DKIM1; k=rsa; p=one"},
		{Name: "abc-2.dkim.mailyard.test", Value: "v=DKIM1; k=rsa; p=two"},
	}); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"abc-1.dkim.mailyard.test": "v=DKIM1; k=rsa; p=one",
		"abc-2.dkim.mailyard.test": "v=DKIM1; k=rsa; p=two",
	}
	if !maps.Equal(store.records, want) {
		t.Fatalf("store = %v, want %v", store.records, want)
	}

	// Idempotent, and a new value replaces the old one.
	if err := pub.Publish(ctx, []Record{{Name: "abc-1.dkim.mailyard.test", Value: "v=DKIM1; k=rsa; p=new"}}); err != nil {
		t.Fatal(err)
	}
	if got := store.records["abc-1.dkim.mailyard.test"]; got != "v=DKIM1; k=rsa; p=new" {
		t.Fatalf("after republishing, value = %q", got)
	}

	if err := pub.Unpublish(ctx, []string{"abc-1.dkim.mailyard.test", "Abc-2.Dkim.Mailyard.Test."}); err != nil {
		t.Fatal(err)
	}
	if len(store.records) != 0 {
		t.Fatalf("after Unpublish the store holds %v", store.records)
	}
	if err := pub.Unpublish(ctx, []string{"abc-1.dkim.mailyard.test"}); err != nil {
		t.Fatalf("Unpublish of a missing name: %v", err)
	}
}

func TestEmbeddedReportsStoreErrors(t *testing.T) {
	ctx := context.Background()
	store := newMemoryStore()
	store.records["a.dkim.mailyard.test"] = "v"
	store.records["b.dkim.mailyard.test"] = "v"
	store.failOn = "a.dkim.mailyard.test"
	pub := NewEmbedded(store)

	err := pub.Publish(ctx, []Record{{Name: "a.dkim.mailyard.test", Value: "v2"}})
	if err == nil || !strings.Contains(err.Error(), "a.dkim.mailyard.test") || !strings.Contains(err.Error(), "database is down") {
		t.Errorf("Publish error = %v", err)
	}
	// One failing name does not keep the others published.
	err = pub.Unpublish(ctx, []string{"a.dkim.mailyard.test", "b.dkim.mailyard.test"})
	if err == nil {
		t.Error("Unpublish: no error")
	}
	if _, ok := store.records["b.dkim.mailyard.test"]; ok {
		t.Error("Unpublish stopped at the first failure")
	}
	if err := pub.Publish(ctx, []Record{{Name: " ", Value: "v"}}); err == nil {
		t.Error("Publish of an empty name: no error")
	}
}
