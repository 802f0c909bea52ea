package devsmtp_test

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/mailyard/mailyard/internal/devsmtp"
	"github.com/mailyard/mailyard/internal/smtpsend"
	"github.com/mailyard/mailyard/internal/testenv"
)

var message = []byte("From: Sender <sender@mailyard.test>\r\n" +
	"To: someone@example.test\r\n" +
	"Subject: hello\r\n" +
	"\r\n" +
	"Hi.\r\n" +
	".\r\n" +
	".leading dot\r\n" +
	"Grüße\r\n")

func TestMessagesAreSavedAsSent(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "mail") // created by Start
	var logs testenv.SyncBuffer
	srv, err := devsmtp.Start("127.0.0.1:0", dir, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })

	sender, err := smtpsend.New(smtpsend.Config{Mode: smtpsend.ModeRelay, Relay: srv.Addr(), HELO: "out.mailyard.test"})
	if err != nil {
		t.Fatal(err)
	}
	send := func(from string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for _, r := range sender.Send(ctx, from, []string{"someone@example.test", "other@example.org"}, message) {
			if r.Status != smtpsend.Delivered {
				t.Fatalf("%s: %s %d %s", r.Recipient, r.Status, r.Code, r.Message)
			}
		}
	}

	emailID := uuid.NewString()
	send("bounces+" + emailID + "@bounces.mailyard.test")
	path := filepath.Join(dir, emailID+".eml")
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, message) {
		t.Errorf("saved message differs from the one sent:\n got %q\nwant %q", got, message)
	}
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if mode := info.Mode().Perm(); mode != 0o600 {
		t.Errorf("file mode %o, want 600", mode)
	}

	// A second message of the same email (a tracked email's next
	// recipient) is kept beside the first.
	send("bounces+" + emailID + ".tag2@bounces.mailyard.test")
	if got, err := os.ReadFile(filepath.Join(dir, emailID+".2.eml")); err != nil || !bytes.Equal(got, message) {
		t.Errorf("the second message of the email: %v\n%q", err, got)
	}
	if got, err := os.ReadFile(path); err != nil || !bytes.Equal(got, message) {
		t.Errorf("the first message of the email after the second: %v\n%q", err, got)
	}

	// Without an email id, or with one that is no plain file name: a
	// random name, inside dir.
	send("noreply@mailyard.test")
	send("bounces+..@mailyard.test")
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
		id, isEML := strings.CutSuffix(e.Name(), ".eml")
		id = strings.TrimSuffix(id, ".2")
		if _, err := uuid.Parse(id); !isEML || err != nil {
			t.Errorf("unexpected file %s in the mail directory", e.Name())
		}
	}
	if len(names) != 4 {
		t.Errorf("files %q, want four messages and no temporary file", names)
	}

	if !strings.Contains(logs.String(), emailID) {
		t.Errorf("log does not name the saved message: %s", logs.String())
	}
	if strings.Contains(logs.String(), "someone@") || strings.Contains(logs.String(), "Subject") {
		t.Errorf("log holds personal data: %s", logs.String())
	}
}

func TestClose(t *testing.T) {
	srv, err := devsmtp.Start("127.0.0.1:0", t.TempDir(), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	addr := srv.Addr()
	if err := srv.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		c.Close()
		t.Error("the server still accepts connections after Close")
	}
}

func TestStartFailsClearly(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := devsmtp.Start("127.0.0.1:0", filepath.Join(file, "mail"), slog.New(slog.DiscardHandler)); err == nil {
		t.Error("Start with a directory under a file succeeded")
	}
	if _, err := devsmtp.Start("127.0.0.1:notaport", t.TempDir(), slog.New(slog.DiscardHandler)); err == nil {
		t.Error("Start with a bad address succeeded")
	}
}
