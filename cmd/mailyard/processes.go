package main

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"go.temporal.io/sdk/client"
	"golang.org/x/crypto/acme/autocert"
	"golang.org/x/sync/errgroup"

	"github.com/mailyard/mailyard/api"
	"github.com/mailyard/mailyard/internal/bouncetag"
	"github.com/mailyard/mailyard/internal/config"
	"github.com/mailyard/mailyard/internal/dnsserver"
	"github.com/mailyard/mailyard/internal/inbound"
	"github.com/mailyard/mailyard/internal/keyusage"
	"github.com/mailyard/mailyard/internal/metrics"
	"github.com/mailyard/mailyard/internal/ratelimit"
	"github.com/mailyard/mailyard/internal/secrets"
	"github.com/mailyard/mailyard/internal/smtpserver"
	"github.com/mailyard/mailyard/internal/store"
	"github.com/mailyard/mailyard/internal/submission"
	"github.com/mailyard/mailyard/internal/temporalclient"
	"github.com/mailyard/mailyard/internal/trackingtls"
	"github.com/mailyard/mailyard/internal/tracktoken"
	"github.com/mailyard/mailyard/internal/verification"
	"github.com/mailyard/mailyard/worker"
)

// openStore connects and refuses a schema that is behind this binary.
func openStore(ctx context.Context, cfg *config.Config) (*store.Store, error) {
	st, err := store.Open(ctx, cfg.DatabaseURL)
	if err != nil {
		return nil, err
	}
	if err := st.EnsureCurrent(ctx); err != nil {
		_ = st.Close()
		return nil, err
	}
	return st, nil
}

// dialTemporal returns a lazy client: the process starts even while Temporal is
// still coming up, and /readyz says when it is reachable. TLS files that do
// not load stop the process here.
func dialTemporal(cfg *config.Config, logger *slog.Logger) (client.Client, error) {
	opts, err := temporalclient.Options(cfg, logger)
	if err != nil {
		return nil, err
	}
	return client.NewLazyClient(opts)
}

// dialTemporalNow connects at once, for `mailyard dev`, whose Temporal
// server this process has just started. The client learns the server's
// capabilities before the API and the workers share it: eager workflow
// start needs them, and the SDK reads them without a lock when it starts
// a workflow, so a lazy client, which learns them when its first worker
// starts, races the API's first eager start.
func dialTemporalNow(ctx context.Context, cfg *config.Config, logger *slog.Logger) (client.Client, error) {
	opts, err := temporalclient.Options(cfg, logger)
	if err != nil {
		return nil, err
	}
	return client.DialContext(ctx, opts)
}

// serveAPI runs the public and internal listeners until ctx ends.
func serveAPI(ctx context.Context, cfg *config.Config, st *store.Store, tc client.Client, logger *slog.Logger) error {
	return serveAPIWith(ctx, cfg, st, tc, logger, false)
}

// testEmailSchedule replaces the email retry schedule in the binary the
// tests build with the mailyard_testhooks tag (testhooks.go); nil, the
// default schedule, in every binary that ships.
var testEmailSchedule []time.Duration

// serveAPIWith is serveAPI; eager starts delivery and email workflows with
// eager workflow start, for a process whose workers share tc (`mailyard
// dev`).
func serveAPIWith(ctx context.Context, cfg *config.Config, st *store.Store, tc client.Client, logger *slog.Logger, eager bool) error {
	verifier, err := verification.New(st, cfg.DNSResolver, cfg.SPFHost, cfg.BounceHost)
	if err != nil {
		return err
	}
	srv := api.New(api.Deps{Config: cfg, Store: st, Temporal: tc, Logger: logger, Verifier: verifier, EagerStart: eager,
		EmailSchedule: testEmailSchedule})
	var certs *autocert.Manager
	if cfg.Tracking.TLSAddr != "" {
		// Before anything starts: an error returns with nothing running.
		if certs, err = trackingCertificates(cfg, st); err != nil {
			return err
		}
	}
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { srv.Run(ctx); return nil })
	g.Go(func() error { return serveHTTP(ctx, "api", cfg.HTTPAddr, srv.Handler(), logger) })
	g.Go(func() error { return serveHTTP(ctx, "internal", cfg.InternalAddr, srv.InternalHandler(), logger) })
	if certs != nil {
		logger.Info("serving tracking over HTTPS for verified custom domains", "addr", cfg.Tracking.TLSAddr, "acme", cfg.Tracking.ACMEDirectory)
		g.Go(func() error {
			return trackingtls.Serve(ctx, cfg.Tracking.TLSAddr, certs, srv.TrackingHandler(), logger)
		})
	}
	err = g.Wait()
	// The listeners have shut down, so no request queues a tracking event
	// any more: write the queued ones before the caller closes the store.
	srv.Close()
	return err
}

// trackingCertificates obtains and shares the certificates of verified
// custom tracking domains (docs/tracking.md): from the ACME server, cached
// sealed in the database for every api process.
func trackingCertificates(cfg *config.Config, st *store.Store) (*autocert.Manager, error) {
	box, err := secrets.New(cfg.EncryptionKey)
	if err != nil {
		return nil, err
	}
	opts := trackingtls.Options{
		DirectoryURL: cfg.Tracking.ACMEDirectory, Email: cfg.Tracking.ACMEEmail,
		Cache: trackingtls.NewCache(st, box),
		Allowed: func(ctx context.Context, host string) (bool, error) {
			return st.VerifiedTrackingDomain(ctx, host)
		},
	}
	if cfg.Tracking.ACMECAFile != "" {
		pem, err := os.ReadFile(cfg.Tracking.ACMECAFile)
		if err != nil {
			return nil, fmt.Errorf("MAILYARD_ACME_CA: %w", err)
		}
		opts.RootCAs = x509.NewCertPool()
		if !opts.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("MAILYARD_ACME_CA: %s holds no PEM certificate", cfg.Tracking.ACMECAFile)
		}
	}
	return trackingtls.NewManager(opts)
}

// runWorker runs the Temporal workers until ctx ends.
func runWorker(ctx context.Context, cfg *config.Config, st *store.Store, tc client.Client, logger *slog.Logger) error {
	box, err := secrets.New(cfg.EncryptionKey)
	if err != nil {
		return err
	}
	if problem := cfg.SMTP.HELOProblem(); problem != "" {
		logger.Warn(problem)
	}
	return worker.Run(ctx, worker.Deps{Config: cfg, Client: tc, Store: st, Box: box, Logger: logger})
}

// serveDNS answers for the DKIM zone from the published records in the database.
func serveDNS(ctx context.Context, cfg *config.Config, st *store.Store, logger *slog.Logger) error {
	return newDNSServer(cfg, st, logger).ListenAndServe(ctx, cfg.DNSAddr)
}

func newDNSServer(cfg *config.Config, st *store.Store, logger *slog.Logger) *dnsserver.Server {
	logger.Info("serving DNS", "zone", cfg.DKIMHost, "addr", cfg.DNSAddr)
	return dnsserver.New(cfg.DKIMHost, st, logger.With("component", "dns")).
		WithNameServerAddresses(cfg.DNSNameServerAddrs).WithResponseRateLimit(cfg.DNSRateLimit)
}

// devRecords gives `mailyard dev`'s DNS server the records of .test domains.
type devRecords struct{ store *store.Store }

func (d devRecords) DevRecords(ctx context.Context, name string) ([]dnsserver.DevRecord, error) {
	rows, err := d.store.DevRecordsAt(ctx, name)
	out := make([]dnsserver.DevRecord, len(rows))
	for i, r := range rows {
		out[i] = dnsserver.DevRecord{Type: r.Type, Value: r.Value}
	}
	return out, err
}

// withMetricsListener runs run with the process's /metrics on
// MAILYARD_METRICS_ADDR when it is set (`mailyard worker` and `mailyard dns`;
// the API serves /metrics on its internal listener). The address is bound
// first, so a taken port stops the process at start; the listener stays up
// until run returns, so a worker waiting for its activities to finish is
// still scraped.
func withMetricsListener(ctx context.Context, cfg *config.Config, logger *slog.Logger, run func(context.Context) error) error {
	if cfg.MetricsAddr == "" {
		return run(ctx)
	}
	ln, err := net.Listen("tcp", cfg.MetricsAddr)
	if err != nil {
		return fmt.Errorf("metrics listener (MAILYARD_METRICS_ADDR): %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", metrics.Handler())
	serveCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	served := make(chan error, 1)
	go func() { served <- serveListener(serveCtx, "metrics", ln, mux, logger) }()
	err = run(ctx)
	stop()
	return errors.Join(err, <-served)
}

// serveHTTP listens on addr and shuts down gracefully when ctx ends.
func serveHTTP(ctx context.Context, name, addr string, h http.Handler, logger *slog.Logger) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("%s listener: %w", name, err)
	}
	return serveListener(ctx, name, ln, h, logger)
}

// httpWriteTimeout bounds a request from the end of its header to the end
// of its answer. It must outlast the slowest answer the API promises: a
// send reads its body for up to 30 s, may wait 10 s for its
// Idempotency-Key's first request, then starts its workflows for up to 30 s
// and, when the start fails, takes its email back. An answer past the
// deadline never reaches the client, which sends again, and the emails
// whose workflows did start go twice.
const httpWriteTimeout = 2 * time.Minute

// serveListener serves h on ln and shuts down gracefully when ctx ends.
func serveListener(ctx context.Context, name string, ln net.Listener, h http.Handler, logger *slog.Logger) error {
	hs := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      httpWriteTimeout,
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    64 << 10,
	}
	logger.Info("listening", "listener", name, "addr", ln.Addr().String())
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), httpDrainTimeout)
	defer cancel()
	if err := hs.Shutdown(shutdownCtx); err != nil {
		// Still a stop: the requests left are cut (their contexts end, so
		// their handlers return), and what they stored the sweeps finish.
		logger.Warn("requests still running at the end of the drain were cut", "listener", name, "drain", httpDrainTimeout)
		hs.Close()
	}
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// httpDrainTimeout is how long a stopping HTTP listener waits for the
// requests under way: longer than a send's 30 s for its workflow start, so
// that a stop does not cut an email between its storage and its answer.
// Deployments give the process more than this to stop (deploy/).
const httpDrainTimeout = 40 * time.Second

// withStoreAndTemporal loads the configuration a long-running process needs,
// opens the store (refusing a schema that is behind) and a Temporal client, and
// runs the process until ctx ends.
func withStoreAndTemporal(ctx context.Context, logger *slog.Logger, name string, need config.Need,
	run func(context.Context, *config.Config, *store.Store, client.Client, *slog.Logger) error) error {
	cfg, err := config.Load(need)
	if err != nil {
		return err
	}
	logger.Info("starting "+name, "config", cfg.String())
	st, err := openStore(ctx, cfg)
	if err != nil {
		return err
	}
	defer st.Close()
	tc, err := dialTemporal(cfg, logger)
	if err != nil {
		return err
	}
	defer tc.Close()
	return run(ctx, cfg, st, tc, logger)
}

func cmdAPI(ctx context.Context, logger *slog.Logger) error {
	return withStoreAndTemporal(ctx, logger, "api", config.NeedAPI, serveAPI)
}

func cmdWorker(ctx context.Context, logger *slog.Logger) error {
	return withStoreAndTemporal(ctx, logger, "worker", config.NeedWorker,
		func(ctx context.Context, cfg *config.Config, st *store.Store, tc client.Client, logger *slog.Logger) error {
			return withMetricsListener(ctx, cfg, logger, func(ctx context.Context) error {
				return runWorker(ctx, cfg, st, tc, logger)
			})
		})
}

func cmdDNS(ctx context.Context, logger *slog.Logger) error {
	cfg, err := config.Load(config.NeedDNS)
	if err != nil {
		return err
	}
	logger.Info("starting dns", "config", cfg.String())
	st, err := openStore(ctx, cfg)
	if err != nil {
		return err
	}
	defer st.Close()
	return withMetricsListener(ctx, cfg, logger, func(ctx context.Context) error {
		return serveDNS(ctx, cfg, st, logger)
	})
}

func cmdInbound(ctx context.Context, logger *slog.Logger) error {
	return withStoreAndTemporal(ctx, logger, "inbound", config.NeedInbound,
		func(ctx context.Context, cfg *config.Config, st *store.Store, tc client.Client, logger *slog.Logger) error {
			return withMetricsListener(ctx, cfg, logger, func(ctx context.Context) error {
				return serveInbound(ctx, cfg, st, tc, logger, inbound.Listener{Addr: cfg.InboundAddr})
			})
		})
}

// serveInbound runs the SMTP server at the bounce host until ctx ends.
func serveInbound(ctx context.Context, cfg *config.Config, st *store.Store, tc client.Client, logger *slog.Logger, l inbound.Listener) error {
	tags, err := bouncetag.New(cfg.EncryptionKey)
	if err != nil {
		return err
	}
	tokens, err := tracktoken.New(cfg.EncryptionKey)
	if err != nil {
		return err
	}
	b := &inbound.Backend{
		Store: st, Temporal: tc, Tags: tags, Tokens: tokens, BounceHost: cfg.BounceHost,
		Retention: cfg.EmailRetention, Logger: logger.With("component", "inbound"),
	}
	l.Server.TLSCertFile, l.Server.TLSKeyFile = cfg.SMTPServer.TLSCertFile, cfg.SMTPServer.TLSKeyFile
	l.Server.MaxConnections = cfg.SMTPServer.MaxConnections
	l.Server.MessageRate = cfg.InboundMessageRate
	return b.Serve(ctx, l, nil)
}

func cmdSubmission(ctx context.Context, logger *slog.Logger) error {
	return withStoreAndTemporal(ctx, logger, "submission", config.NeedSubmission,
		func(ctx context.Context, cfg *config.Config, st *store.Store, tc client.Client, logger *slog.Logger) error {
			return withMetricsListener(ctx, cfg, logger, func(ctx context.Context) error {
				return serveSubmission(ctx, cfg, st, tc, logger, false)
			})
		})
}

// serveSubmission runs SMTP submission until ctx ends; eager as for
// serveAPIWith.
func serveSubmission(ctx context.Context, cfg *config.Config, st *store.Store, tc client.Client, logger *slog.Logger, eager bool) error {
	logger = logger.With("component", "submission")
	usage := keyusage.New(st, logger)
	go usage.Run(ctx)
	b := &submission.Backend{
		Store: st, Temporal: tc, Limits: ratelimit.New[int64](cfg.RateLimit), Usage: usage, AllowInsecureAuth: cfg.Submission.AllowInsecureAuth,
		Retention: cfg.EmailRetention, EagerStart: eager, Logger: logger,
	}
	return b.Serve(ctx, submission.Listener{
		Addr: cfg.Submission.Addr, TLSAddr: cfg.Submission.TLSAddr,
		Server: smtpserver.Config{
			Hostname: cfg.SMTP.HELO, TLSCertFile: cfg.SMTPServer.TLSCertFile, TLSKeyFile: cfg.SMTPServer.TLSKeyFile,
			MaxConnections: cfg.SMTPServer.MaxConnections,
		},
	}, nil)
}
