package smtpserver

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"
)

// certReloader serves the certificate of TLSCertFile/TLSKeyFile and picks up
// a renewed one without a restart (certificates are renewed by tools that
// rewrite the files, and a stale certificate makes senders fall back to
// plain text or fail). It looks at the files at most once per interval, so
// a busy server does not stat on every handshake.
type certReloader struct {
	certFile, keyFile string
	log               *slog.Logger
	interval          time.Duration // a field so that tests can shorten it

	mu      sync.Mutex
	cert    *tls.Certificate
	seen    [2]os.FileInfo // of the pair last tried, loaded or not
	checked time.Time
}

// changed reports whether a file is not the one seen before: another file
// (renewal tools write a new file and rename it over the old one, or swap a
// symbolic link, as Kubernetes does with secrets), or the same one rewritten.
// The file's identity matters because a modification time is only as fine
// as the kernel's clock tick: a file renamed over one written within the
// same few milliseconds, of the same size, has the same time and size.
func changed(seen, now os.FileInfo) bool {
	return !os.SameFile(seen, now) || !seen.ModTime().Equal(now.ModTime()) || seen.Size() != now.Size()
}

func newCertReloader(certFile, keyFile string, log *slog.Logger) (*certReloader, error) {
	r := &certReloader{certFile: certFile, keyFile: keyFile, log: log, interval: time.Second}
	stamps, err := r.stat()
	if err != nil {
		return nil, fmt.Errorf("smtpserver: TLS certificate: %w", err)
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("smtpserver: TLS certificate: %w", err)
	}
	r.cert, r.seen, r.checked = &cert, stamps, time.Now()
	return r, nil
}

func (r *certReloader) stat() ([2]os.FileInfo, error) {
	var infos [2]os.FileInfo
	for i, name := range []string{r.certFile, r.keyFile} {
		fi, err := os.Stat(name)
		if err != nil {
			return infos, err
		}
		infos[i] = fi
	}
	return infos, nil
}

// getCertificate is tls.Config.GetCertificate. When the files changed it
// loads the new pair; if that fails (a half-written renewal, a key that does
// not match) it logs and keeps serving the old certificate, and tries again
// when the files change again.
func (r *certReloader) getCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	if now.Sub(r.checked) < r.interval {
		return r.cert, nil
	}
	r.checked = now
	stamps, err := r.stat()
	if err != nil {
		r.log.Error("smtp server: cannot stat TLS certificate, keeping the old one", "error", err)
		return r.cert, nil
	}
	if !changed(r.seen[0], stamps[0]) && !changed(r.seen[1], stamps[1]) {
		return r.cert, nil
	}
	r.seen = stamps
	cert, err := tls.LoadX509KeyPair(r.certFile, r.keyFile)
	if err != nil {
		r.log.Error("smtp server: cannot load the changed TLS certificate, keeping the old one",
			"cert_file", r.certFile, "key_file", r.keyFile, "error", err)
		return r.cert, nil
	}
	r.cert = &cert
	r.log.Info("smtp server: reloaded TLS certificate", "cert_file", r.certFile)
	return r.cert, nil
}
