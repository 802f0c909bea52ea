// Package e2e holds end-to-end tests: the real mailyard binary's processes against
// a real PostgreSQL, a real Temporal dev server and real DNS servers on loopback.
package e2e
