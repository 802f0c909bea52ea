// Package trackingtls serves the click and open tracking routes over HTTPS for
// customers' custom tracking domains (track.shop.example, a CNAME to our
// tracking host), with certificates obtained from an ACME CA (Let's Encrypt in
// production) by golang.org/x/crypto/acme/autocert.
//
// Certificates are obtained on the first TLS handshake for a name, with the
// TLS-ALPN-01 challenge: the CA connects to port 443 of the name and the
// listener answers with a challenge certificate. So the listener Serve starts
// must be what is reachable on port 443 of the tracking host; there is no
// HTTP-01 (port 80) or DNS-01 fallback.
//
// Every api process shares one ACME account and one certificate per domain
// through the database (Cache over the store's acme_cache table): a
// certificate obtained by one process is served by all, the challenge
// certificate one process created is answered by whichever process the CA's
// connection reaches, and a restart or a new process orders nothing. The
// account key and the certificates' private keys are sealed with the secret
// box (MAILYARD_ENCRYPTION_KEY), bound to their cache key; they are never
// stored in plain text nor logged.
//
// Only names the caller's Allowed function accepts (verified custom tracking
// domains) get a certificate, and Allowed is asked on every handshake: anyone
// can point a name at our address, and without the check every such name
// would make us order a certificate, spending the CA's rate limits (per
// account, per registered domain) that the real domains need. A handshake for
// any other name fails before anything is asked of the CA. Since any
// ClientHello makes a question, each gets 5 seconds and at most 4 run at
// once; no answer is remembered, so a removed domain stops being served at
// once and a verified one is served at once.
//
// autocert renews a certificate it holds without asking again, for as long
// as the process runs; the manager's cache stores a certificate only for a
// name Allowed accepts, so the renewal of a removed domain's certificate is
// not written back to the database its removal deleted it from.
package trackingtls
