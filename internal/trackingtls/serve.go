package trackingtls

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"log"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"golang.org/x/crypto/acme"
	"golang.org/x/crypto/acme/autocert"

	"github.com/mailyard/mailyard/internal/domainname"
)

// ShutdownTimeout is how long Serve waits for requests in flight once its
// context ends.
const ShutdownTimeout = 15 * time.Second

// Serve listens on addr (":443" in production: TLS-ALPN-01 challenges come to
// port 443) and serves handler over TLS with m's certificates until ctx ends,
// then shuts down gracefully. It returns nil after a shutdown for ctx.
func Serve(ctx context.Context, addr string, m *autocert.Manager, handler http.Handler, logger *slog.Logger) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	return ServeListener(ctx, ln, m, handler, logger)
}

// ServeListener is Serve on a listener the caller made (tests); it closes ln.
func ServeListener(ctx context.Context, ln net.Listener, m *autocert.Manager, handler http.Handler, logger *slog.Logger) error {
	cfg := m.TLSConfig() // h2, http/1.1 and acme-tls/1 for the challenges
	cfg.MinVersion = tls.VersionTLS12
	cfg.GetCertificate = warnOfFailures(cfg.GetCertificate, logger)
	hs := &http.Server{
		Handler:   handler,
		TLSConfig: cfg,
		// Internet-facing: slow or idle clients must not hold connections.
		// Obtaining a certificate happens in the handshake, before these
		// start; the handshake itself is bounded by ReadHeaderTimeout.
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          log.New(errorLog{logger}, "", 0),
	}
	errc := make(chan error, 1)
	go func() { errc <- hs.ServeTLS(ln, "", "") }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), ShutdownTimeout)
	defer cancel()
	err := hs.Shutdown(shutdownCtx)
	if serveErr := <-errc; !errors.Is(serveErr, http.ErrServerClosed) {
		err = errors.Join(err, serveErr)
	}
	return err
}

// errorLog routes net/http's error log to slog. Failed TLS handshakes (port
// 443 of the internet: scanners, names nobody verified) are debug messages
// (warnOfFailures warns of those that matter); the rest (a handler's panic)
// are warnings.
type errorLog struct{ logger *slog.Logger }

func (l errorLog) Write(p []byte) (int, error) {
	msg := string(bytes.TrimRight(p, "\n"))
	level := slog.LevelWarn
	if bytes.Contains(p, []byte("TLS handshake error")) {
		level = slog.LevelDebug
	}
	l.logger.Log(context.Background(), level, msg, "listener", "tracking-tls")
	return len(p), nil
}

// warnOfFailures logs a warning when a handshake gets no certificate for a
// name the host policy accepted: the CA refused or failed the order (the
// customer's CNAME is gone, a rate limit). Without it an operator learns of
// a certificate that cannot be had or renewed only when the customers'
// links fail. What anyone can cause stays quiet: names the policy refused or
// could not ask about (the database down, a flood of made-up names waiting
// for their lookups), names that are not host names, and challenge
// handshakes.
func warnOfFailures(get func(*tls.ClientHelloInfo) (*tls.Certificate, error), logger *slog.Logger) func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return func(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
		cert, err := get(hello)
		if err != nil && !errors.Is(err, ErrNotAllowed) && !errors.Is(err, errUnanswered) && !isChallenge(hello) {
			if name, bad := domainname.NormalizeHost(hello.ServerName); bad == nil && strings.Contains(name, ".") {
				logger.Warn("tracking TLS: no certificate for a custom tracking domain", "name", name, "error", err)
			}
		}
		return cert, err
	}
}

// isChallenge says whether a handshake is a TLS-ALPN-01 challenge: it
// offers acme-tls/1 alone.
func isChallenge(hello *tls.ClientHelloInfo) bool {
	return len(hello.SupportedProtos) == 1 && hello.SupportedProtos[0] == acme.ALPNProto
}
