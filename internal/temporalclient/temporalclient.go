// Package temporalclient builds the Temporal client options every Mailyard
// process dials with: address and namespace, TLS (mutual TLS with a client
// certificate, a private CA) and an API key from the configuration, the
// process's logger, and the SDK metrics handler of internal/metrics; and
// RunOf, the one question the sweeps ask Temporal about a workflow id.
package temporalclient

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"

	"go.temporal.io/sdk/client"
	tlog "go.temporal.io/sdk/log"

	"github.com/mailyard/mailyard/internal/config"
	"github.com/mailyard/mailyard/internal/metrics"
)

// Options returns the client options of cfg. It reads the TLS files now, so a
// missing or malformed file stops the process at start with the variable's
// name instead of failing every call later.
//
// An API key alone connects with TLS and the system's roots (the SDK turns
// TLS on for credentials), as Temporal Cloud expects.
func Options(cfg *config.Config, logger *slog.Logger) (client.Options, error) {
	opts := client.Options{
		HostPort:          cfg.TemporalAddress,
		Namespace:         cfg.TemporalNamespace,
		Logger:            tlog.NewStructuredLogger(logger.With("component", "temporal-sdk")),
		MetricsHandler:    metrics.TemporalHandler(),
		ConnectionOptions: Connection(),
	}
	if cfg.TemporalTLS.Enabled() {
		tlsCfg, err := TLSConfig(cfg.TemporalTLS)
		if err != nil {
			return client.Options{}, err
		}
		opts.ConnectionOptions.TLS = tlsCfg
	}
	if cfg.TemporalAPIKey != "" {
		opts.Credentials = client.NewAPIKeyStaticCredentials(cfg.TemporalAPIKey)
	}
	return opts, nil
}

// Connection is how every Mailyard process connects to Temporal: without
// the SDK's default gzip. What crosses Temporal is ids, counts and durations
// (a few hundred bytes a message), and gzip set up a fresh compressor's
// tables for each: about a quarter of the client's CPU of a workflow start
// (README, "Benchmarks"), and the server answers a gzipped request in gzip.
// Answers the server compresses anyway are still read.
func Connection() client.ConnectionOptions {
	return client.ConnectionOptions{GrpcCompression: &client.GrpcCompressionNone{}}
}

// TLSConfig is the TLS configuration of files: the server's certificate is
// checked against CAFile (or the system's roots), and CertFile/KeyFile, when
// set, are presented as the client certificate.
//
// The client certificate is read again at each TLS handshake, so a worker
// that runs for weeks picks up a renewed certificate (cert-manager, Vault)
// when it next connects; if the files cannot be read then, the last good
// pair is used.
func TLSConfig(files config.TemporalTLS) (*tls.Config, error) {
	tlsCfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if files.CAFile != "" {
		pem, err := os.ReadFile(files.CAFile)
		if err != nil {
			return nil, fmt.Errorf("TEMPORAL_TLS_CA: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("TEMPORAL_TLS_CA: %s holds no PEM certificate", files.CAFile)
		}
		tlsCfg.RootCAs = pool
	}
	if files.CertFile != "" || files.KeyFile != "" {
		if files.CertFile == "" || files.KeyFile == "" {
			return nil, errors.New("TEMPORAL_TLS_CERT and TEMPORAL_TLS_KEY: set both (mutual TLS) or neither")
		}
		kp := &keyPair{certFile: files.CertFile, keyFile: files.KeyFile}
		if _, err := kp.load(); err != nil {
			return nil, fmt.Errorf("TEMPORAL_TLS_CERT and TEMPORAL_TLS_KEY: %w", err)
		}
		tlsCfg.GetClientCertificate = kp.get
	}
	return tlsCfg, nil
}

// keyPair reads a client certificate from its files, keeping the last one
// that loaded.
type keyPair struct {
	certFile, keyFile string
	mu                sync.Mutex
	last              *tls.Certificate
}

func (k *keyPair) load() (*tls.Certificate, error) {
	cert, err := tls.LoadX509KeyPair(k.certFile, k.keyFile)
	k.mu.Lock()
	defer k.mu.Unlock()
	if err != nil {
		return k.last, err
	}
	k.last = &cert
	return k.last, nil
}

func (k *keyPair) get(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
	cert, err := k.load()
	if cert == nil {
		return nil, err
	}
	return cert, nil
}
