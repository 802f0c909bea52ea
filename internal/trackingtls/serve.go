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
	"time"

	"golang.org/x/crypto/acme/autocert"
)

// ShutdownTimeout is how long Serve waits for requests in flight once its
// context ends.
const ShutdownTimeout = 15 * time.Second

// Serve listens on addr (":443" in production: TLS-ALPN-01 challenges come to
// port 443) and serves handler over TLS with m's certificates until ctx ends,
// then shuts down gracefully. It returns nil after a shutdown for ctx.
func Serve(ctx context.Context, addr string, m *autocert.Manager, handler http.Handler) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	return ServeListener(ctx, ln, m, handler)
}

// ServeListener is Serve on a listener the caller made (tests); it closes ln.
func ServeListener(ctx context.Context, ln net.Listener, m *autocert.Manager, handler http.Handler) error {
	cfg := m.TLSConfig() // h2, http/1.1 and acme-tls/1 for the challenges
	cfg.MinVersion = tls.VersionTLS12
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
		ErrorLog:          log.New(errorLog{}, "", 0),
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
// 443 of the internet: scanners, names nobody verified) are debug messages;
// the rest (a handler's panic) are warnings.
type errorLog struct{}

func (errorLog) Write(p []byte) (int, error) {
	msg := string(bytes.TrimRight(p, "\n"))
	level := slog.LevelWarn
	if bytes.Contains(p, []byte("TLS handshake error")) {
		level = slog.LevelDebug
	}
	slog.Default().Log(context.Background(), level, msg, "listener", "tracking-tls")
	return len(p), nil
}
