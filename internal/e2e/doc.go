// Package e2e holds end-to-end tests: the real mailyard binary's processes against
// a real PostgreSQL, a real Temporal dev server and real DNS servers on loopback.
//
// Each test starts a stack of its own (database, Temporal server, ports, mail and
// webhook receivers), so the tests run side by side (t.Parallel), three at a time
// unless -parallel says otherwise (TestMain). Alone, a test keeps the two cores
// about a third busy: most of its time goes waiting for an outage to end, a
// verification window, a retry or a time-out. The heavy ones (heavy: hundreds of
// deliveries or emails, processes killed, a Temporal server stopped, attempts that
// last 15 s inside a workflow task) run one at a time, each beside light ones: two
// heavy tests together starve the workers enough that a workflow task times out
// and Temporal repeats an attempt, which a test that counts attempts sees.
// Deadlines are minutes and the few timing checks loose (a 503 within 5 s of a
// stopped database), so a test that shares the cores does not fail for being
// slow. TestMeasureSizing measures, and runs alone, before the others.
package e2e
