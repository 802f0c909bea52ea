package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/uptrace/bun"
)

// StatCounter names one counter of the daily rollup (a column of
// email_stats_daily).
type StatCounter string

// The counters of the rollup. Each counts recipients: a message to three
// recipients that are all delivered adds 3 to delivered.
const (
	StatAccepted   StatCounter = "accepted"
	StatDelivered  StatCounter = "delivered"
	StatDeferred   StatCounter = "deferred"
	StatBounced    StatCounter = "bounced"
	StatComplained StatCounter = "complained"
	StatOpened     StatCounter = "opened"
	StatClicked    StatCounter = "clicked"
)

// StatCounters lists every counter in documentation order.
func StatCounters() []StatCounter {
	return []StatCounter{StatAccepted, StatDelivered, StatDeferred, StatBounced, StatComplained, StatOpened, StatClicked}
}

// Valid reports whether c is a counter of the rollup. Only valid counters
// reach SQL, where a counter is a column name.
func (c StatCounter) Valid() bool {
	switch c {
	case StatAccepted, StatDelivered, StatDeferred, StatBounced, StatComplained, StatOpened, StatClicked:
		return true
	}
	return false
}

// MaxStatsDays is the longest range Stats reads, in days, both ends included.
const MaxStatsDays = 90

// dayLayout is how a UTC day is written in email_stats_daily.day: a DATE
// literal on PostgreSQL, the whole value on SQLite (text that sorts like the
// date).
const dayLayout = "2006-01-02"

// StatCounts are the counters of a day or a range.
type StatCounts struct {
	Accepted   int64 `bun:"accepted"`
	Delivered  int64 `bun:"delivered"`
	Deferred   int64 `bun:"deferred"`
	Bounced    int64 `bun:"bounced"`
	Complained int64 `bun:"complained"`
	Opened     int64 `bun:"opened"`
	Clicked    int64 `bun:"clicked"`
}

// Add adds o's counters to c.
func (c *StatCounts) Add(o StatCounts) {
	c.Accepted += o.Accepted
	c.Delivered += o.Delivered
	c.Deferred += o.Deferred
	c.Bounced += o.Bounced
	c.Complained += o.Complained
	c.Opened += o.Opened
	c.Clicked += o.Clicked
}

// DailyStats are one UTC day's counters.
type DailyStats struct {
	// Day is midnight UTC of the day.
	Day time.Time
	StatCounts
}

// CountEmailEvent adds n to one counter of (org, domain, UTC day of at). Call
// it inside the transaction that records the event, so that the event and its
// count commit together: an event recorded once counts once. One upsert, so
// concurrent calls for the same row never lose an increment (PostgreSQL locks
// the row; SQLite has one writer).
func CountEmailEvent(ctx context.Context, db bun.IDB, orgID, domainID int64, counter StatCounter, at time.Time, n int) error {
	if !counter.Valid() {
		return fmt.Errorf("unknown stat counter %q", counter)
	}
	if n < 0 {
		return fmt.Errorf("stat counter %s: negative increment %d", counter, n)
	}
	if n == 0 {
		return nil
	}
	col := bun.Ident(string(counter))
	_, err := db.NewRaw(
		"INSERT INTO email_stats_daily (organization_id, domain_id, day, ?) VALUES (?, ?, ?, ?) "+
			"ON CONFLICT (organization_id, domain_id, day) DO UPDATE SET ? = email_stats_daily.? + excluded.?",
		col, orgID, domainID, at.UTC().Format(dayLayout), n, col, col, col,
	).Exec(ctx)
	return err
}

// Stats returns the organization's counters (of one domain when domainID is
// set) for every UTC day from start to end, both included, in order; days
// without a row count zero. It reads the rollup only: at most one row per
// domain and day.
func (s *Store) Stats(ctx context.Context, orgID int64, domainID *int64, start, end time.Time) ([]DailyStats, error) {
	first, last := utcDay(start), utcDay(end)
	if last.Before(first) {
		return nil, errors.New("stats range ends before it starts")
	}
	days := int(last.Sub(first).Hours()/24) + 1
	if days > MaxStatsDays {
		return nil, fmt.Errorf("stats range of %d days; at most %d", days, MaxStatsDays)
	}
	var rows []struct {
		Day string `bun:"day"`
		StatCounts
	}
	q := s.DB.NewSelect().TableExpr("email_stats_daily").ColumnExpr("day")
	// CAST: PostgreSQL sums BIGINT into NUMERIC.
	for _, c := range StatCounters() {
		q = q.ColumnExpr("CAST(SUM(?) AS BIGINT) AS ?", bun.Ident(string(c)), bun.Ident(string(c)))
	}
	q = q.Where("organization_id = ?", orgID).
		Where("day >= ?", first.Format(dayLayout)).Where("day <= ?", last.Format(dayLayout))
	if domainID != nil {
		q = q.Where("domain_id = ?", *domainID)
	}
	if err := q.GroupExpr("day").Scan(ctx, &rows); err != nil {
		return nil, err
	}
	byDay := make(map[string]StatCounts, len(rows))
	for _, r := range rows {
		byDay[r.Day] = r.StatCounts
	}
	out := make([]DailyStats, days)
	for i := range out {
		d := first.AddDate(0, 0, i)
		out[i] = DailyStats{Day: d, StatCounts: byDay[d.Format(dayLayout)]}
	}
	return out, nil
}

// utcDay is midnight UTC of t's UTC day.
func utcDay(t time.Time) time.Time {
	y, m, d := t.UTC().Date()
	return time.Date(y, m, d, 0, 0, 0, 0, time.UTC)
}
