package api

import (
	"database/sql/driver"
	"errors"
	"net"
	"strings"
	"syscall"

	"github.com/uptrace/bun/driver/pgdriver"
	"go.temporal.io/api/serviceerror"

	"github.com/mailyard/mailyard/internal/store"
)

// isUnavailable recognises a database or Temporal that cannot be reached or is
// going away, which the client should retry (503) rather than report (500).
func isUnavailable(err error) bool {
	var netErr net.Error
	var pgErr pgdriver.Error
	var unavailable *serviceerror.Unavailable
	var deadline *serviceerror.DeadlineExceeded
	// Temporal's rate limits and its cap on a workflow's updates in flight
	// (ten by default: a client retrying a reschedule while its step waits
	// on the database) pass, as an unreachable server comes back.
	var exhausted *serviceerror.ResourceExhausted
	switch {
	case errors.Is(err, driver.ErrBadConn), errors.Is(err, syscall.ECONNREFUSED),
		errors.As(err, &netErr), errors.As(err, &unavailable), errors.As(err, &deadline), errors.As(err, &exhausted), store.IsBusy(err):
		return true
	case errors.As(err, &pgErr):
		// Class 08 (connection exception), 57P0x (server shutting down or starting).
		code := pgErr.Field('C')
		return strings.HasPrefix(code, "08") || strings.HasPrefix(code, "57P0")
	default:
		// database/sql reports a closed pool (process shutting down) only as text.
		return strings.Contains(err.Error(), "sql: database is closed")
	}
}
