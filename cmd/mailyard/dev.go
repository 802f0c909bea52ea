package main

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sync/errgroup"

	"github.com/mailyard/mailyard/internal/config"
	"github.com/mailyard/mailyard/internal/devsmtp"
	"github.com/mailyard/mailyard/internal/inbound"
	"github.com/mailyard/mailyard/internal/keyauth"
	"github.com/mailyard/mailyard/internal/keys"
	"github.com/mailyard/mailyard/internal/store"
	"github.com/mailyard/mailyard/internal/temporaldev"
)

const dataDir = ".data"

// devDefaults are the embedded defaults of the README ("Set-up"); a variable set in the
// environment still wins.
var devDefaults = map[string]string{
	"MAILYARD_DATABASE_URL":                   "sqlite://" + filepath.Join(dataDir, "mailyard.db"),
	"TEMPORAL_ADDRESS":                        "127.0.0.1:7233",
	"MAILYARD_HTTP_ADDR":                      "127.0.0.1:8080",
	"MAILYARD_INTERNAL_ADDR":                  "127.0.0.1:8081",
	"MAILYARD_DNS_ADDR":                       "127.0.0.1:8053",
	"MAILYARD_WEBHOOK_ALLOW_PRIVATE_NETWORKS": "true",
	"MAILYARD_WEBHOOK_ALLOW_HTTP":             "true",
	// Email goes to dev's own SMTP server, which keeps each message as
	// .data/mail/<email_id>.eml.
	"MAILYARD_SMTP_MODE":  "relay",
	"MAILYARD_SMTP_RELAY": devSMTPAddr,
	// The bounce host's SMTP server, where the sink's bounces and
	// complaints arrive (docs/inbound.md).
	"MAILYARD_INBOUND_ADDR": "127.0.0.1:2526",
	// SMTP submission for applications; AUTH without TLS, on loopback only
	// (cmdDev refuses it elsewhere).
	"MAILYARD_SUBMISSION_ADDR": "127.0.0.1:1587",
	// Tracking links point at the API's own listener (docs/tracking.md).
	"MAILYARD_TRACKING_URL":                   "http://127.0.0.1:8080",
	"MAILYARD_SUBMISSION_ALLOW_INSECURE_AUTH": "true",
}

// devSMTPAddr is where `mailyard dev` listens for the mail it sends.
const devSMTPAddr = "127.0.0.1:2525"

// cmdDev runs the whole product in one process on SQLite, with the real Temporal
// dev server as a child process persisted under .data/.
func cmdDev(ctx context.Context, logger *slog.Logger) error {
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return err
	}
	encKey, err := readOrCreate(filepath.Join(dataDir, "encryption-key"), func() (string, error) {
		b := make([]byte, 32)
		_, err := rand.Read(b)
		return base64.StdEncoding.EncodeToString(b), err
	})
	if err != nil {
		return err
	}
	internalToken, err := readOrCreate(filepath.Join(dataDir, "internal-token"), func() (string, error) {
		return keys.RandomString(40, keys.LowerAlnum)
	})
	if err != nil {
		return err
	}
	generated := map[string]string{"MAILYARD_ENCRYPTION_KEY": encKey, "MAILYARD_INTERNAL_TOKEN": internalToken}
	// Tracking links point at the API's own listener (docs/tracking.md).
	httpAddr := os.Getenv("MAILYARD_HTTP_ADDR")
	if httpAddr == "" {
		httpAddr = devDefaults["MAILYARD_HTTP_ADDR"]
	}
	generated["MAILYARD_TRACKING_URL"] = "http://" + httpAddr
	cfg, err := config.LoadFrom(func(name string) string {
		if v := os.Getenv(name); v != "" {
			return v
		}
		if v, ok := generated[name]; ok {
			return v
		}
		return devDefaults[name]
	}, config.Need{Database: true, EncryptionKey: true, InternalToken: true})
	if err != nil {
		return err
	}
	if os.Getenv("MAILYARD_DNS_RESOLVER") == "" && cfg.DNSPublisher == "embedded" {
		// Verification asks the dev DNS server, which answers for .test domains.
		cfg.DNSResolver = cfg.DNSAddr
	}

	temporalPort, err := devTemporalPort(cfg.TemporalAddress)
	if err != nil {
		return err
	}
	fmt.Fprintln(os.Stderr, "starting the Temporal dev server (state in .data/temporal.db)...")
	temporal, err := temporaldev.Start(ctx, temporaldev.Options{
		DBFile: filepath.Join(dataDir, "temporal.db"),
		Port:   temporalPort,
		// 0: the Temporal port plus 1000, 8233 by default.
		UIPort: 0,
		Output: os.Stderr,
	})
	if err != nil {
		return err
	}
	defer temporal.Stop()

	st, err := store.Open(ctx, cfg.DatabaseURL)
	if err != nil {
		return err
	}
	defer st.Close()
	if _, err := st.Migrate(ctx); err != nil {
		return err
	}
	adminKey, err := ensureDevOrganization(ctx, st)
	if err != nil {
		return err
	}

	tc, err := dialTemporalNow(ctx, cfg, logger)
	if err != nil {
		return err
	}
	defer tc.Close()

	mailDir := filepath.Join(dataDir, "mail")
	sinkAddr := devSMTPAddr
	if cfg.SMTP.Mode == "relay" && config.IsLoopback(cfg.SMTP.Relay) {
		// The relay was moved (tests run dev on free ports): listen there.
		sinkAddr = cfg.SMTP.Relay
	}
	// The sink answers bounce-later* and complain* recipients by mail, like
	// a remote server after its 250: through the MX record of the MAIL
	// FROM subdomain (which dev's DNS server answers) to the bounce host,
	// which is this process's inbound listener.
	var reports *devsmtp.Reports
	if cfg.DNSPublisher == "embedded" {
		reports = &devsmtp.Reports{
			Hostname: "mx.recipient.test", Resolver: cfg.DNSAddr, BounceHost: cfg.BounceHost,
			Route: map[string]string{cfg.BounceHost: cfg.InboundAddr},
		}
	}
	sink, err := devsmtp.StartWithReports(sinkAddr, mailDir, logger, reports)
	if err != nil {
		return err
	}
	defer sink.Close()

	fmt.Fprintf(os.Stderr, `
Mailyard is running on its embedded defaults (Ctrl-C stops everything):
  API          http://%s/api/v1   (docs: http://%s/docs)
  Temporal UI  %s
  DKIM zone    %s on %s (udp and tcp)
  sent mail    %s/<email_id>.eml (SMTP on %s)
  bounce host  %s (SMTP; bounces and complaints arrive here)
  submission   %s (SMTP AUTH with a credential's username and key)
  admin key    %s   (also in .data/admin-key)

  curl -H "Authorization: Bearer $(cat .data/admin-key)" http://%s/api/v1/domains

`, cfg.HTTPAddr, cfg.HTTPAddr, temporal.UIURL, cfg.DKIMHost, cfg.DNSAddr, mailDir, sink.Addr(), cfg.InboundAddr, cfg.Submission.Addr, adminKey, cfg.HTTPAddr)

	g, gctx := errgroup.WithContext(ctx)
	// The API, submission and the workers share tc: a delivery or email
	// workflow they start gets its first workflow task straight back (eager
	// workflow start), which shortens ingest → receipt and 202 → 250
	// (README, "Delivery attempts" and "Benchmarks").
	g.Go(func() error { return serveAPIWith(gctx, cfg, st, tc, logger, true) })
	g.Go(func() error { return runWorker(gctx, cfg, st, tc, logger) })
	g.Go(func() error { return serveInbound(gctx, cfg, st, tc, logger, inbound.Listener{Addr: cfg.InboundAddr}) })
	g.Go(func() error { return serveSubmission(gctx, cfg, st, tc, logger, true) })
	if cfg.DNSPublisher == "embedded" {
		dns := newDNSServer(cfg, st, logger).WithDevDomains(devRecords{st})
		g.Go(func() error { return dns.ListenAndServe(gctx, cfg.DNSAddr) })
	}
	err = g.Wait()
	fmt.Fprintln(os.Stderr, "stopping...")
	return err
}

// ensureDevOrganization keeps the `dev` organization and its key across runs: the
// key in .data/admin-key is reused while it is still active.
func ensureDevOrganization(ctx context.Context, st *store.Store) (string, error) {
	path := filepath.Join(dataDir, "admin-key")
	if b, err := os.ReadFile(path); err == nil {
		secret := strings.TrimSpace(string(b))
		if _, err := keyauth.Check(ctx, st, secret); err == nil {
			return secret, nil
		}
	}
	_, secret, err := createOrganization(ctx, st, "dev")
	if err != nil {
		return "", err
	}
	return secret, writeSecretFile(path, secret+"\n")
}

// readOrCreate returns the trimmed content of a secret file, creating it first.
func readOrCreate(path string, generate func() (string, error)) (string, error) {
	b, err := os.ReadFile(path)
	if err == nil {
		return strings.TrimSpace(string(b)), nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return "", err
	}
	v, err := generate()
	if err != nil {
		return "", err
	}
	return v, writeSecretFile(path, v+"\n")
}

// devTemporalPort is the port of the Temporal dev server that `mailyard dev`
// starts on this machine, for the TEMPORAL_ADDRESS its clients dial: that
// address must be this machine's (loopback or localhost).
func devTemporalPort(addr string) (int, error) {
	host, port, err := net.SplitHostPort(addr)
	n, perr := strconv.Atoi(port)
	if err != nil || perr != nil || n < 1 || n > 65535 {
		return 0, fmt.Errorf("TEMPORAL_ADDRESS %q is not a host:port", addr)
	}
	if ip, err := netip.ParseAddr(host); host != "localhost" && (err != nil || !ip.IsLoopback()) {
		return 0, fmt.Errorf("TEMPORAL_ADDRESS %q: mailyard dev starts its own Temporal dev server on this machine, so the address must be a loopback one (127.0.0.1:7233 by default)", addr)
	}
	return n, nil
}
