package api_test

import (
	"context"
	"encoding/base64"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/google/uuid"
	"go.temporal.io/sdk/client"

	"github.com/mailyard/mailyard/api"
	"github.com/mailyard/mailyard/internal/config"
	"github.com/mailyard/mailyard/internal/keyauth"
	"github.com/mailyard/mailyard/internal/keys"
	"github.com/mailyard/mailyard/internal/store"
	"github.com/mailyard/mailyard/internal/testenv"
	"github.com/mailyard/mailyard/internal/tracktoken"
)

// Opens that reach the listener after shutdown began (its context ended,
// Run returned) are written by the time Close returns: `mailyard api`
// calls Close once its listeners, which finish the requests in flight,
// have shut down, and closes the store after it. (Before Close, the
// queue's writers stopped with Run's context, and the events of the
// requests still in flight stayed in a queue nobody read.)
func TestTrackingEventsOfRequestsDuringShutdownAreWritten(t *testing.T) {
	ctx := context.Background()
	st := testenv.OpenStore(t, testenv.PostgresURL(t))
	const encKey = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="
	vars := map[string]string{
		"MAILYARD_DATABASE_URL":   "postgres://unused",
		"MAILYARD_ENCRYPTION_KEY": encKey,
		"MAILYARD_INTERNAL_TOKEN": "internal-token-for-tests",
		"MAILYARD_TRACKING_URL":   "http://127.0.0.1:8080",
	}
	cfg, err := config.LoadFrom(func(name string) string { return vars[name] }, config.Need{})
	if err != nil {
		t.Fatal(err)
	}
	// Nothing listens there: recording an open with no webhook asks
	// Temporal nothing.
	tc, err := client.NewLazyClient(client.Options{HostPort: testenv.FreeAddr(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tc.Close)
	a := api.New(api.Deps{Config: cfg, Store: st, Temporal: tc, Logger: slog.New(slog.DiscardHandler)})

	secret, _ := keys.NewAPIKey()
	org, err := st.CreateOrganizationWithKey(ctx, "acme", keyauth.WithSecret(secret, &store.APIKey{Label: "boot", Username: "acme", Permissions: store.Permissions{"admin"}}))
	if err != nil {
		t.Fatal(err)
	}
	d := &store.Domain{OrganizationID: org.ID, Domain: "shop.example", MailFromSubdomain: "mail.shop.example", DKIMToken: "tok", Status: store.DomainVerified}
	if err := st.CreateDomain(ctx, d, nil); err != nil {
		t.Fatal(err)
	}
	rcpts := []string{"a@x.example", "b@x.example", "c@x.example"}
	e := &store.Email{ID: uuid.NewString(), OrganizationID: org.ID, DomainID: d.ID, FromAddress: "hello@shop.example",
		Subject: "Sale", Source: store.SourceAPI, TrackOpens: true}
	if err := st.CreateEmail(ctx, e, rcpts); err != nil {
		t.Fatal(err)
	}
	key, _ := base64.StdEncoding.DecodeString(encKey)
	tokens, err := tracktoken.New(key)
	if err != nil {
		t.Fatal(err)
	}

	runCtx, stop := context.WithCancel(ctx)
	ran := make(chan struct{})
	go func() { a.Run(runCtx); close(ran) }()
	stop()
	<-ran

	for i := range rcpts {
		tok := tokens.MustMint(tracktoken.Token{Kind: tracktoken.Open, EmailID: uuid.MustParse(e.ID), Recipient: i})
		w := httptest.NewRecorder()
		a.Handler().ServeHTTP(w, httptest.NewRequest("GET", "/t/o/"+tok+".gif", nil))
		if w.Code != http.StatusOK {
			t.Fatalf("open: %d", w.Code)
		}
	}
	a.Close()

	rs, err := st.EmailRecipients(ctx, e.ID)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rs {
		if r.Opens != 1 {
			t.Errorf("%s: %d opens recorded when Close returned, want 1", r.Address, r.Opens)
		}
	}
}
