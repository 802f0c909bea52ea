package smtpserver

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"
)

// certReloader serves the certificate of a PEM pair and loads it again when
// either file changes, so a renewed certificate needs no restart. A pair
// that does not load keeps the previous certificate in use.
type certReloader struct {
	certFile, keyFile string
	logger            *slog.Logger

	mu        sync.Mutex
	cert      *tls.Certificate
	stamp     string
	checkedAt time.Time
}

// recheckEvery bounds how often a handshake looks at the files.
const recheckEvery = time.Second

func newCertReloader(certFile, keyFile string, logger *slog.Logger) (*certReloader, error) {
	r := &certReloader{certFile: certFile, keyFile: keyFile, logger: logger}
	stamp, err := r.fileStamp()
	if err != nil {
		return nil, fmt.Errorf("smtp TLS: %w", err)
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("smtp TLS (MAILYARD_SMTP_TLS_CERT, MAILYARD_SMTP_TLS_KEY): %w", err)
	}
	r.cert, r.stamp, r.checkedAt = &cert, stamp, time.Now()
	return r, nil
}

// fileStamp identifies the files' current contents by size and time.
func (r *certReloader) fileStamp() (string, error) {
	stamp := ""
	for _, f := range []string{r.certFile, r.keyFile} {
		fi, err := os.Stat(f)
		if err != nil {
			return "", err
		}
		stamp += fmt.Sprintf("%d:%d;", fi.Size(), fi.ModTime().UnixNano())
	}
	return stamp, nil
}

func (r *certReloader) get(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if time.Since(r.checkedAt) < recheckEvery {
		return r.cert, nil
	}
	r.checkedAt = time.Now()
	stamp, err := r.fileStamp()
	if err != nil || stamp == r.stamp {
		return r.cert, nil
	}
	cert, err := tls.LoadX509KeyPair(r.certFile, r.keyFile)
	if err != nil {
		// Possibly half-written: the next check tries again.
		r.logger.Warn("smtp TLS: the changed certificate does not load; keeping the previous one", "error", err)
		return r.cert, nil
	}
	r.cert, r.stamp = &cert, stamp
	r.logger.Info("smtp TLS: certificate reloaded", "file", r.certFile)
	return r.cert, nil
}
