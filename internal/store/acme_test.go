package store_test

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"github.com/mailyard/mailyard/internal/store"
	"github.com/mailyard/mailyard/internal/testenv"
)

func TestACMECache(t *testing.T) {
	testenv.Dialects(t, func(t *testing.T, url string) {
		ctx := context.Background()
		st := testenv.OpenStore(t, url)

		if _, err := st.ACMECacheEntry(ctx, "track.shop.example"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("missing entry: %v, want ErrNotFound", err)
		}
		// Deleting what is not there is fine.
		if err := st.DeleteACMECacheEntry(ctx, "track.shop.example"); err != nil {
			t.Fatal(err)
		}

		first := []byte{0x01, 0x00, 0xff, 'a'} // binary, with a NUL byte
		if err := st.PutACMECacheEntry(ctx, "track.shop.example", first); err != nil {
			t.Fatal(err)
		}
		if err := st.PutACMECacheEntry(ctx, "acme_account+key", []byte("account")); err != nil {
			t.Fatal(err)
		}
		e, err := st.ACMECacheEntry(ctx, "track.shop.example")
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(e.Data, first) || e.UpdatedAt.IsZero() {
			t.Fatalf("entry %+v", e)
		}
		firstAt := e.UpdatedAt

		// Put replaces (a renewed certificate).
		second := []byte("renewed")
		if err := st.PutACMECacheEntry(ctx, "track.shop.example", second); err != nil {
			t.Fatal(err)
		}
		if e, err = st.ACMECacheEntry(ctx, "track.shop.example"); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(e.Data, second) || e.UpdatedAt.Before(firstAt) {
			t.Fatalf("replaced entry %+v (first written %s)", e, firstAt)
		}

		// Delete removes one key only.
		if err := st.DeleteACMECacheEntry(ctx, "track.shop.example"); err != nil {
			t.Fatal(err)
		}
		if _, err := st.ACMECacheEntry(ctx, "track.shop.example"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("deleted entry: %v, want ErrNotFound", err)
		}
		if e, err := st.ACMECacheEntry(ctx, "acme_account+key"); err != nil || string(e.Data) != "account" {
			t.Fatalf("other entry after delete: %+v, %v", e, err)
		}
	})
}
