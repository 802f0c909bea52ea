package api

import (
	"database/sql/driver"
	"errors"
	"net"
	"syscall"

	"go.temporal.io/api/serviceerror"
)

// isUnavailable recognises a database or Temporal that cannot be reached, which
// the client should retry (503) rather than report (500).
func isUnavailable(err error) bool {
	var netErr net.Error
	var unavailable *serviceerror.Unavailable
	var deadline *serviceerror.DeadlineExceeded
	return errors.Is(err, driver.ErrBadConn) ||
		errors.Is(err, syscall.ECONNREFUSED) ||
		errors.As(err, &netErr) ||
		errors.As(err, &unavailable) ||
		errors.As(err, &deadline)
}
