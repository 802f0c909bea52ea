package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/mailyard/mailyard/internal/store"
)

// A credential created while its domain is being deleted: the create read
// the domain verified, the deletion revoked the domain's keys, and the key
// stored after that stayed active for a deleted domain. Lined up here: the
// deletion waits for the domain's row (held by the test), the create reads
// the domain and waits behind the deletion; then both go. The create must
// see the domain deleted and answer as for any deleted domain.
func TestCreateCredentialWhileItsDomainIsDeleted(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	domainID := h.domainInStatus(h.orgID, "gone.example", store.DomainVerified)

	holder, err := h.store.DB.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = holder.Rollback() }()
	if _, err := holder.ExecContext(ctx, "SELECT id FROM domains WHERE id = ? FOR UPDATE", domainID); err != nil {
		t.Fatal(err)
	}

	deleted := make(chan error, 1)
	go func() {
		_, err := h.store.DeleteDomainForCustomer(ctx, h.orgID, domainID)
		deleted <- err
	}()
	h.waitForLockWaiters(1)
	created := h.createCredentialAside(domainID)
	h.waitForLockWaiters(2)
	if err := holder.Commit(); err != nil {
		t.Fatal(err)
	}

	select {
	case err := <-deleted:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the deletion did not finish")
	}
	a := h.awaitAnswer(created)
	h.checkNoActiveKeyOf(domainID)
	e, _ := a.body["error"].(map[string]any)
	if a.err != nil || a.status != http.StatusNotFound || e["code"] != "not_found" || e["message"] != "sending domain not found" {
		t.Errorf("create answered %d %v (%v), want 404 not_found \"sending domain not found\"", a.status, a.body, a.err)
	}
}

// The same race lined up another way, which does not depend on the lock
// the deletion takes: the create's insert waits (its foreign key check of
// the organization's row, held by the test) and the deletion runs in the
// meantime. Before, the deletion finished and the key was stored active
// after it; now the create holds the domain's row, so the deletion waits
// for the key and revokes it.
func TestCreateCredentialWaitingWhileItsDomainIsDeleted(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	domainID := h.domainInStatus(h.orgID, "gone.example", store.DomainVerified)

	holder, err := h.store.DB.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = holder.Rollback() }()
	if _, err := holder.ExecContext(ctx, "SELECT id FROM organizations WHERE id = ? FOR UPDATE", h.orgID); err != nil {
		t.Fatal(err)
	}
	created := h.createCredentialAside(domainID)
	h.waitForLockWaiters(1)
	deleted := make(chan error, 1)
	go func() {
		_, err := h.store.DeleteDomainForCustomer(ctx, h.orgID, domainID)
		deleted <- err
	}()
	// The deletion finishes, or waits for the create's lock of the domain.
	deadline := time.Now().Add(20 * time.Second)
	for len(deleted) == 0 && h.lockWaiters() < 2 {
		if time.Now().After(deadline) {
			t.Fatal("the deletion neither finished nor waited")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := holder.Commit(); err != nil {
		t.Fatal(err)
	}
	a := h.awaitAnswer(created)
	select {
	case err := <-deleted:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the deletion did not finish")
	}
	h.checkNoActiveKeyOf(domainID)
	if a.err != nil || (a.status != http.StatusCreated && a.status != http.StatusNotFound) {
		t.Errorf("create answered %d %v (%v)", a.status, a.body, a.err)
	}
}

type credentialAnswer struct {
	status int
	body   map[string]any
	err    error
}

// createCredentialAside sends Create credential for the domain from another
// goroutine; the channel gets the answer.
func (h *harness) createCredentialAside(domainID int64) <-chan credentialAnswer {
	created := make(chan credentialAnswer, 1)
	go func() {
		body, _ := json.Marshal(map[string]any{"sending_domain_id": domainID, "label": "late", "permissions": []string{"send"}})
		req, _ := http.NewRequest("POST", h.srv.URL+"/api/v1/credentials", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+h.adminKey)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			created <- credentialAnswer{err: err}
			return
		}
		defer res.Body.Close()
		raw, _ := io.ReadAll(res.Body)
		a := credentialAnswer{status: res.StatusCode}
		a.err = json.Unmarshal(raw, &a.body)
		created <- a
	}()
	return created
}

func (h *harness) awaitAnswer(created <-chan credentialAnswer) credentialAnswer {
	h.t.Helper()
	select {
	case a := <-created:
		return a
	case <-time.After(30 * time.Second):
		h.t.Fatal("the create did not answer")
		return credentialAnswer{}
	}
}

// checkNoActiveKeyOf fails the test if the domain has an active key.
func (h *harness) checkNoActiveKeyOf(domainID int64) {
	h.t.Helper()
	var active int
	if err := h.store.DB.NewRaw("SELECT count(*) FROM api_keys WHERE sending_domain_id = ? AND status = ?", domainID, store.KeyActive).
		Scan(context.Background(), &active); err != nil {
		h.t.Fatal(err)
	}
	if active != 0 {
		h.t.Errorf("%d active credentials of the deleted domain", active)
	}
}

// lockWaiters is how many sessions of the harness's database wait for a
// lock.
func (h *harness) lockWaiters() int {
	h.t.Helper()
	var waiting int
	if err := h.store.DB.NewRaw("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'").
		Scan(context.Background(), &waiting); err != nil {
		h.t.Fatal(err)
	}
	return waiting
}

// waitForLockWaiters waits until n sessions of the harness's database wait
// for a lock.
func (h *harness) waitForLockWaiters(n int) {
	h.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		waiting := h.lockWaiters()
		if waiting >= n {
			return
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("%d sessions wait for a lock, want %d", waiting, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
