package store

import (
	"context"

	"github.com/uptrace/bun"
)

// Page asks a list query for one page of a keyset walk: the rows after the key
// After in the list's order (nil: from the start), at most Limit of them (0:
// every row). Keyset rather than OFFSET, so rows added during a walk neither
// repeat nor push older rows out of it.
type Page struct {
	Limit int
	After any
}

// Order is the direction of a list's key.
type Order bool

// Orders of list keys.
const (
	Ascending  Order = false
	Descending Order = true
)

// scanPage runs q, a select into rows, as page p of a list ordered by the
// unique column key, and reports whether rows follow the page. It asks for one
// row more than the page holds: its presence is the answer.
func scanPage[T any](ctx context.Context, q *bun.SelectQuery, rows *[]T, key string, order Order, p Page) (more bool, err error) {
	if p.After != nil {
		op := " > ?"
		if order == Descending {
			op = " < ?"
		}
		q = q.Where(key+op, p.After)
	}
	if order == Descending {
		q = q.OrderExpr(key + " DESC")
	} else {
		q = q.OrderExpr(key)
	}
	if p.Limit > 0 {
		q = q.Limit(int64(p.Limit) + 1)
	}
	if err := q.Scan(ctx); err != nil {
		return false, err
	}
	if p.Limit > 0 && len(*rows) > p.Limit {
		*rows = (*rows)[:p.Limit]
		return true, nil
	}
	return false, nil
}
