// Package webhook performs one webhook HTTP delivery: it checks destination
// URLs, builds and signs the event body, sends it through a client that can
// only reach globally routable addresses, and classifies what came back.
//
// Scheduling, retries and persistence live elsewhere; everything here works
// on a single attempt so it can be tested against real sockets on loopback.
package webhook
