package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"slices"
	"testing"
	"time"

	"github.com/mailyard/mailyard/internal/keys"
	"github.com/mailyard/mailyard/internal/store"
	"github.com/mailyard/mailyard/internal/testenv"
)

// Two `mailyard api` processes share one PostgreSQL database. A credential revoked
// through one is refused by the other on the very next request: no process keeps
// keys in memory.
func TestRevocationReachesEveryAPIProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	databaseURL := testenv.PostgresURL(t)
	env := []string{
		"MAILYARD_DATABASE_URL=" + databaseURL,
		"MAILYARD_ENCRYPTION_KEY=AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=",
		"MAILYARD_INTERNAL_TOKEN=internal-token-for-tests",
		// Nothing listens there: the client is lazy and credentials need no Temporal.
		"TEMPORAL_ADDRESS=" + testenv.FreeAddr(t),
	}
	testenv.Run(t, env, "migrate", "up")
	out := testenv.Run(t, env, "org", "create", "acme")
	bootstrap := regexp.MustCompile(`myk_[0-9A-Za-z]+`).FindString(out)
	if keys.CheckAPIKey(bootstrap) != nil {
		t.Fatalf("no admin key in the output of org create: %s", out)
	}

	// Verification needs real DNS; the domain is stored as the onboarding workflow
	// leaves a verified one.
	domainID := verifiedDomain(t, databaseURL, "acme.example")

	a := startAPI(t, env)
	b := startAPI(t, env)

	// Revoked through A, refused by B.
	id, secret := createCredential(t, a, bootstrap, domainID)
	expectStatus(t, b, "GET", "/api/v1/credentials", secret, 200)
	expectStatus(t, a, "DELETE", fmt.Sprintf("/api/v1/credentials/%d", id), bootstrap, 200)
	expectStatus(t, b, "GET", "/api/v1/credentials", secret, 401)
	expectStatus(t, a, "GET", "/api/v1/credentials", secret, 401)

	// A key revokes itself through B and is refused by A.
	id, secret = createCredential(t, b, bootstrap, domainID)
	expectStatus(t, a, "GET", "/api/v1/credentials", secret, 200)
	expectStatus(t, b, "DELETE", fmt.Sprintf("/api/v1/credentials/%d", id), secret, 200)
	expectStatus(t, a, "GET", "/api/v1/credentials", secret, 401)
	expectStatus(t, a, "DELETE", fmt.Sprintf("/api/v1/credentials/%d", id), bootstrap, 404)
}

func verifiedDomain(t *testing.T, databaseURL, name string) int64 {
	t.Helper()
	ctx := context.Background()
	st, err := store.Open(ctx, databaseURL)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	org, err := st.OrganizationByName(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	token, err := keys.RandomString(32, keys.LowerAlnum)
	if err != nil {
		t.Fatal(err)
	}
	d := &store.Domain{OrganizationID: org.ID, Domain: name, MailFromSubdomain: "mail." + name, DKIMToken: token, Status: store.DomainVerified}
	if err := st.CreateDomain(ctx, d, nil); err != nil {
		t.Fatal(err)
	}
	return d.ID
}

// startAPI runs `mailyard api` on free ports until the test ends and returns its
// base URL once it answers /healthz.
func startAPI(t *testing.T, env []string) string {
	t.Helper()
	httpAddr := testenv.FreeAddr(t)
	p := testenv.Start(t, append(slices.Clip(env), "MAILYARD_HTTP_ADDR="+httpAddr, "MAILYARD_INTERNAL_ADDR="+testenv.FreeAddr(t)), "api")
	base := "http://" + httpAddr
	deadline := time.Now().Add(30 * time.Second)
	for {
		if p.Exited() {
			t.Fatalf("api on %s exited (status %d):\n%s", httpAddr, p.ExitCode(), p.Output())
		}
		if res, err := http.Get(base + "/healthz"); err == nil {
			res.Body.Close()
			if res.StatusCode == 200 {
				return base
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("api on %s did not answer /healthz within 30 s:\n%s", httpAddr, p.Output())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func call(t *testing.T, base, method, path, key string, body any) (int, map[string]any) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		buf, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(buf)
	}
	req, err := http.NewRequest(method, base+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var decoded map[string]any
	_ = json.NewDecoder(res.Body).Decode(&decoded)
	return res.StatusCode, decoded
}

func expectStatus(t *testing.T, base, method, path, key string, want int) {
	t.Helper()
	if status, body := call(t, base, method, path, key, nil); status != want {
		t.Fatalf("%s %s%s answered %d, want %d: %v", method, base, path, status, want, body)
	}
}

func createCredential(t *testing.T, base, key string, domainID int64) (int64, string) {
	t.Helper()
	status, body := call(t, base, "POST", "/api/v1/credentials", key, map[string]any{
		"sending_domain_id": domainID, "label": "shared", "permissions": []string{"admin"},
	})
	if status != 201 {
		t.Fatalf("create credential answered %d: %v", status, body)
	}
	data := body["data"].(map[string]any)
	return int64(data["credential"].(map[string]any)["id"].(float64)), data["secret_key"].(string)
}
