package store

import (
	"database/sql/driver"
	"fmt"
	"slices"
	"strings"
)

// CommaList is a small set of fixed words (permissions, event types) kept as a
// comma-separated list in one TEXT column, portable across PostgreSQL and SQLite.
type CommaList []string

// Value implements driver.Valuer.
func (l CommaList) Value() (driver.Value, error) { return strings.Join(l, ","), nil }

// Scan implements sql.Scanner.
func (l *CommaList) Scan(src any) error {
	var s string
	switch v := src.(type) {
	case string:
		s = v
	case []byte:
		s = string(v)
	case nil:
		s = ""
	default:
		return fmt.Errorf("comma list: cannot scan %T", src)
	}
	*l = CommaList{}
	if s != "" {
		*l = strings.Split(s, ",")
	}
	return nil
}

// Has reports whether word is in the list.
func (l CommaList) Has(word string) bool { return slices.Contains(l, word) }
