package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
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
	bin := buildBinary(t)
	databaseURL := testenv.PostgresURL(t)
	env := []string{
		"MAILYARD_DATABASE_URL=" + databaseURL,
		"MAILYARD_ENCRYPTION_KEY=AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=",
		"MAILYARD_INTERNAL_TOKEN=internal-token-for-tests",
		// Nothing listens there: the client is lazy and credentials need no Temporal.
		"TEMPORAL_ADDRESS=" + freeAddr(t),
	}
	runOnce(t, bin, env, "migrate", "up")
	out := runOnce(t, bin, env, "org", "create", "acme")
	bootstrap := regexp.MustCompile(`myk_[0-9A-Za-z]+`).FindString(out)
	if keys.CheckAPIKey(bootstrap) != nil {
		t.Fatalf("no admin key in the output of org create: %s", out)
	}

	// Verification needs real DNS; the domain is stored as the onboarding workflow
	// leaves a verified one.
	domainID := verifiedDomain(t, databaseURL, "acme.example")

	a := startAPI(t, bin, env, "a")
	b := startAPI(t, bin, env, "b")

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

// buildBinary compiles this command once into the test's temporary directory.
func buildBinary(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "mailyard")
	cmd := exec.Command("go", "build", "-o", bin, ".")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

func runOnce(t *testing.T, bin string, env []string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("mailyard %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// freeAddr returns a loopback address nothing listens on at the moment.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return addr
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

// lockedBuffer collects a process's log lines for the failure message.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// startAPI runs `mailyard api` on free ports until the test ends and returns its
// base URL once it answers /healthz.
func startAPI(t *testing.T, bin string, env []string, name string) string {
	t.Helper()
	httpAddr := freeAddr(t)
	cmd := exec.Command(bin, "api")
	cmd.Env = append(os.Environ(), env...)
	cmd.Env = append(cmd.Env, "MAILYARD_HTTP_ADDR="+httpAddr, "MAILYARD_INTERNAL_ADDR="+freeAddr(t))
	logs := &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-exited:
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("api %s logs:\n%s", name, logs.String())
		}
	})
	base := "http://" + httpAddr
	deadline := time.Now().Add(30 * time.Second)
	for {
		select {
		case err := <-exited:
			t.Fatalf("api %s exited: %v\n%s", name, err, logs.String())
		default:
		}
		if res, err := http.Get(base + "/healthz"); err == nil {
			res.Body.Close()
			if res.StatusCode == 200 {
				return base
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("api %s did not answer /healthz within 30 s:\n%s", name, logs.String())
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
