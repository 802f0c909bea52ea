// Package e2e holds end-to-end tests: the real mailyard binary's processes against
// a real PostgreSQL, a real Temporal dev server and real DNS servers on loopback.
//
// Each test starts a stack of its own (databases, Temporal server, ports), so tests
// could run side by side; most run one after another, because they load the two
// cores and some measure how fast something happens. The few that spend their time
// waiting (for a verification window, a stopped BIND, receivers that hang until a
// time-out) and load little call t.Parallel: they run two at a time once the others
// are done, which takes about 45 s off this package, the longest in `make test`.
package e2e
