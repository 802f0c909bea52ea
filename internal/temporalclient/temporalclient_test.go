package temporalclient

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"log/slog"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/stats"

	"github.com/mailyard/mailyard/internal/config"
	"github.com/mailyard/mailyard/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

var quiet = slog.New(slog.DiscardHandler)

// pki is a CA with a server certificate for 127.0.0.1 and a client
// certificate, written as PEM files.
type pki struct {
	dir                   string
	ca                    *x509.Certificate
	caKey                 *ecdsa.PrivateKey
	caFile                string
	serverCert            tls.Certificate
	clientCert, clientKey string
	otherCAFile           string
	clientCAPool          *x509.CertPool
}

func newPKI(t *testing.T) *pki {
	t.Helper()
	p := &pki{dir: t.TempDir()}
	p.ca, p.caKey = selfSigned(t, "Mailyard test CA")
	p.caFile = p.writePEM(t, "ca.crt", "CERTIFICATE", p.ca.Raw)
	other, _ := selfSigned(t, "Another CA")
	p.otherCAFile = p.writePEM(t, "other-ca.crt", "CERTIFICATE", other.Raw)

	serverDER, serverKey := p.issue(t, "temporal-frontend", x509.ExtKeyUsageServerAuth)
	p.serverCert = tls.Certificate{Certificate: [][]byte{serverDER}, PrivateKey: serverKey}
	p.clientCert, p.clientKey = p.writeClient(t, "mailyard-worker")
	p.clientCAPool = x509.NewCertPool()
	p.clientCAPool.AddCert(p.ca)
	return p
}

func selfSigned(t *testing.T, cn string) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return cert, key
}

func (p *pki) issue(t *testing.T, cn string, usage x509.ExtKeyUsage) ([]byte, *ecdsa.PrivateKey) {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.ca, &key.PublicKey, p.caKey)
	if err != nil {
		t.Fatal(err)
	}
	return der, key
}

// writeClient issues a client certificate and writes it and its key.
func (p *pki) writeClient(t *testing.T, cn string) (certFile, keyFile string) {
	t.Helper()
	der, key := p.issue(t, cn, x509.ExtKeyUsageClientAuth)
	keyDER, _ := x509.MarshalPKCS8PrivateKey(key)
	return p.writePEM(t, "client.crt", "CERTIFICATE", der), p.writePEM(t, "client.key", "PRIVATE KEY", keyDER)
}

func (p *pki) writePEM(t *testing.T, name, typ string, der []byte) string {
	t.Helper()
	path := filepath.Join(p.dir, name)
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// frontend is a gRPC server with TLS that requires a client certificate of
// the test CA and speaks the parts of Temporal's frontend a client's first
// calls use (the health service, GetSystemInfo). It records the API key and
// client certificate of every call.
type frontend struct {
	workflowservice.UnimplementedWorkflowServiceServer
	addr string
	mu   sync.Mutex
	auth []string
	cns  []string
	// encodings are the grpc-encoding of every request the server read.
	encodings []string
}

// The frontend is its own stats handler, to see how each request came.
func (f *frontend) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context   { return ctx }
func (f *frontend) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }
func (f *frontend) HandleConn(context.Context, stats.ConnStats)                       {}
func (f *frontend) HandleRPC(_ context.Context, s stats.RPCStats) {
	if in, ok := s.(*stats.InHeader); ok {
		f.mu.Lock()
		f.encodings = append(f.encodings, in.Compression)
		f.mu.Unlock()
	}
}

func startFrontend(t *testing.T, p *pki) *frontend {
	t.Helper()
	f := &frontend{}
	creds := credentials.NewTLS(&tls.Config{
		Certificates: []tls.Certificate{p.serverCert},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    p.clientCAPool,
		MinVersion:   tls.VersionTLS12,
	})
	srv := grpc.NewServer(grpc.Creds(creds), grpc.UnaryInterceptor(f.record), grpc.StatsHandler(f))
	hs := health.NewServer()
	hs.SetServingStatus("temporal.api.workflowservice.v1.WorkflowService", healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(srv, hs)
	workflowservice.RegisterWorkflowServiceServer(srv, f)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	f.addr = ln.Addr().String()
	return f
}

func (f *frontend) record(ctx context.Context, req any, info *grpc.UnaryServerInfo, next grpc.UnaryHandler) (any, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	cn := ""
	if p, ok := peer.FromContext(ctx); ok {
		if ti, ok := p.AuthInfo.(credentials.TLSInfo); ok && len(ti.State.PeerCertificates) > 0 {
			cn = ti.State.PeerCertificates[0].Subject.CommonName
		}
	}
	f.mu.Lock()
	f.auth = append(f.auth, strings.Join(md.Get("authorization"), ","))
	f.cns = append(f.cns, cn)
	f.mu.Unlock()
	return next(ctx, req)
}

func (f *frontend) GetSystemInfo(context.Context, *workflowservice.GetSystemInfoRequest) (*workflowservice.GetSystemInfoResponse, error) {
	return &workflowservice.GetSystemInfoResponse{ServerVersion: "test"}, nil
}

func dialCheck(t *testing.T, cfg *config.Config) error {
	t.Helper()
	opts, err := Options(cfg, quiet)
	if err != nil {
		t.Fatal(err)
	}
	opts.ConnectionOptions.GetSystemInfoTimeout = 3 * time.Second
	tc, err := client.NewLazyClient(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = tc.CheckHealth(ctx, nil)
	return err
}

// The client presents its certificate, checks the server's against the CA
// of TEMPORAL_TLS_CA, and sends TEMPORAL_API_KEY as a bearer token on every
// call.
func TestMutualTLSAndAPIKeyReachTheServer(t *testing.T) {
	p := newPKI(t)
	f := startFrontend(t, p)
	cfg := &config.Config{TemporalAddress: f.addr, TemporalNamespace: "default", TemporalAPIKey: "tmprl-test-key",
		TemporalTLS: config.TemporalTLS{CertFile: p.clientCert, KeyFile: p.clientKey, CAFile: p.caFile}}
	if err := dialCheck(t, cfg); err != nil {
		t.Fatalf("health check over mutual TLS: %v", err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.auth) < 2 {
		t.Fatalf("the server saw %d calls, want GetSystemInfo and the health check", len(f.auth))
	}
	for i := range f.auth {
		if f.auth[i] != "Bearer tmprl-test-key" || f.cns[i] != "mailyard-worker" {
			t.Errorf("call %d: authorization %q, client certificate %q", i, f.auth[i], f.cns[i])
		}
	}
}

// Requests go uncompressed: they carry ids and counts, which gzip made
// cost more CPU than they saved in bytes (README, "Benchmarks").
func TestRequestsAreNotCompressed(t *testing.T) {
	p := newPKI(t)
	f := startFrontend(t, p)
	cfg := &config.Config{TemporalAddress: f.addr, TemporalNamespace: "default",
		TemporalTLS: config.TemporalTLS{CertFile: p.clientCert, KeyFile: p.clientKey, CAFile: p.caFile}}
	if err := dialCheck(t, cfg); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.encodings) < 2 {
		t.Fatalf("the server read %d requests, want GetSystemInfo and the health check", len(f.encodings))
	}
	for i, enc := range f.encodings {
		if enc != "" && enc != "identity" {
			t.Errorf("request %d came with grpc-encoding %q", i, enc)
		}
	}
}

// A server certificate from another CA, or no client certificate where the
// server requires one, fails the connection.
func TestTLSFailures(t *testing.T) {
	p := newPKI(t)
	f := startFrontend(t, p)
	wrongCA := &config.Config{TemporalAddress: f.addr, TemporalNamespace: "default",
		TemporalTLS: config.TemporalTLS{CertFile: p.clientCert, KeyFile: p.clientKey, CAFile: p.otherCAFile}}
	if err := dialCheck(t, wrongCA); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("server certificate of another CA: %v", err)
	}
	noClientCert := &config.Config{TemporalAddress: f.addr, TemporalNamespace: "default",
		TemporalTLS: config.TemporalTLS{CAFile: p.caFile}}
	if err := dialCheck(t, noClientCert); err == nil {
		t.Error("no client certificate: the server accepted the connection")
	}
}

// Bad files stop the process at start, naming the variable.
func TestBadFilesNameTheirVariable(t *testing.T) {
	p := newPKI(t)
	notPEM := filepath.Join(p.dir, "not.pem")
	if err := os.WriteFile(notPEM, []byte("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		files config.TemporalTLS
		want  string
	}{
		{config.TemporalTLS{CAFile: filepath.Join(p.dir, "missing.crt")}, "TEMPORAL_TLS_CA: open "},
		{config.TemporalTLS{CAFile: notPEM}, "TEMPORAL_TLS_CA: " + notPEM + " holds no PEM certificate"},
		{config.TemporalTLS{CertFile: p.clientCert, KeyFile: notPEM}, "TEMPORAL_TLS_CERT and TEMPORAL_TLS_KEY: "},
		{config.TemporalTLS{CertFile: p.clientCert, KeyFile: p.caFile}, "TEMPORAL_TLS_CERT and TEMPORAL_TLS_KEY: "},
		{config.TemporalTLS{CertFile: p.clientCert}, "TEMPORAL_TLS_CERT and TEMPORAL_TLS_KEY: set both"},
	} {
		_, err := Options(&config.Config{TemporalAddress: "127.0.0.1:7233", TemporalTLS: c.files}, quiet)
		if err == nil || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q...", c.files, err, c.want)
		}
	}
}

// A renewed client certificate is used by the next handshake; files that do
// not load then leave the last good certificate in use.
func TestClientCertificateIsReadAtEachHandshake(t *testing.T) {
	p := newPKI(t)
	tlsCfg, err := TLSConfig(config.TemporalTLS{CertFile: p.clientCert, KeyFile: p.clientKey})
	if err != nil {
		t.Fatal(err)
	}
	cn := func() string {
		t.Helper()
		c, err := tlsCfg.GetClientCertificate(&tls.CertificateRequestInfo{})
		if err != nil {
			t.Fatal(err)
		}
		leaf, _ := x509.ParseCertificate(c.Certificate[0])
		return leaf.Subject.CommonName
	}
	if got := cn(); got != "mailyard-worker" {
		t.Fatalf("first certificate %q", got)
	}
	p.writeClient(t, "mailyard-worker-renewed")
	if got := cn(); got != "mailyard-worker-renewed" {
		t.Fatalf("after renewal %q", got)
	}
	if err := os.WriteFile(p.clientKey, []byte("half-written"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := cn(); got != "mailyard-worker-renewed" {
		t.Fatalf("with a broken key file %q", got)
	}
}

// The real Temporal dev server behind a TLS terminator that requires the
// client certificate: a worker's client connects with TEMPORAL_TLS_* and
// talks to Temporal.
func TestRealTemporalBehindMutualTLS(t *testing.T) {
	p := newPKI(t)
	upstream := testenv.Temporal(t)
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{
		Certificates: []tls.Certificate{p.serverCert},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    p.clientCAPool,
		NextProtos:   []string{"h2"}, // gRPC insists on ALPN h2
		MinVersion:   tls.VersionTLS12,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				up, err := net.Dial("tcp", upstream)
				if err != nil {
					return
				}
				defer up.Close()
				go func() { _, _ = io.Copy(up, c); up.Close() }()
				_, _ = io.Copy(c, up)
			}()
		}
	}()

	opts, err := Options(&config.Config{TemporalAddress: ln.Addr().String(), TemporalNamespace: "default",
		TemporalTLS: config.TemporalTLS{CertFile: p.clientCert, KeyFile: p.clientKey, CAFile: p.caFile}}, quiet)
	if err != nil {
		t.Fatal(err)
	}
	tc, err := client.Dial(opts)
	if err != nil {
		t.Fatalf("dial Temporal through TLS: %v", err)
	}
	defer tc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ns, err := tc.WorkflowService().DescribeNamespace(ctx, &workflowservice.DescribeNamespaceRequest{Namespace: "default"})
	if err != nil || ns.GetNamespaceInfo().GetName() != "default" {
		t.Fatalf("describe namespace through TLS: %v", err)
	}
}
