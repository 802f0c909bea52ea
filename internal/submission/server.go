package submission

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/mailyard/mailyard/internal/smtpserver"
)

// Listener is where and how the server listens.
type Listener struct {
	// Addr serves SMTP with STARTTLS (MAILYARD_SUBMISSION_ADDR); TLSAddr,
	// when set, implicit TLS (MAILYARD_SUBMISSION_TLS_ADDR).
	Addr, TLSAddr string
	// Server holds the shared SMTP listener rules.
	Server smtpserver.Config
}

// Serve listens and serves until ctx ends. ready, if not nil, gets the
// addresses once they listen (TLSAddr's is "" when it is not set).
func (b *Backend) Serve(ctx context.Context, l Listener, ready func(addr, tlsAddr string)) error {
	cfg := l.Server
	if cfg.Hostname == "" {
		cfg.Hostname = "localhost" // the greeting's name only
	}
	cfg.MaxRecipients = MaxRecipients
	// go-smtp would answer AUTH without TLS with its own 523; the session
	// decides instead (AuthMechanisms, Auth), with the 530 5.7.0 of
	// docs/submission.md, and offers no AUTH before TLS.
	cfg.AllowInsecureAuth = true
	if cfg.Logger == nil {
		cfg.Logger = b.Logger
	}
	srv, err := smtpserver.New(cfg, b)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", l.Addr)
	if err != nil {
		return fmt.Errorf("submission listener (MAILYARD_SUBMISSION_ADDR): %w", err)
	}
	var tlsLn net.Listener
	if l.TLSAddr != "" {
		if tlsLn, err = net.Listen("tcp", l.TLSAddr); err != nil {
			_ = ln.Close()
			return fmt.Errorf("submission TLS listener (MAILYARD_SUBMISSION_TLS_ADDR): %w", err)
		}
	}
	b.Logger.Info("listening", "listener", "submission", "addr", ln.Addr().String())
	tlsAddr := ""
	if tlsLn != nil {
		tlsAddr = tlsLn.Addr().String()
		b.Logger.Info("listening", "listener", "submission-tls", "addr", tlsAddr)
	}
	if ready != nil {
		ready(ln.Addr().String(), tlsAddr)
	}

	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return srv.Serve(ln) })
	if tlsLn != nil {
		g.Go(func() error { return srv.ServeTLS(tlsLn) })
	}
	g.Go(func() error {
		<-gctx.Done()
		shutdownCtx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		return srv.Shutdown(shutdownCtx)
	})
	err = g.Wait()
	b.Wait()
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}
