package store

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"time"

	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect"
	"github.com/uptrace/bun/schema"
)

// StatCounter names one counter of the daily rollup (a column of
// email_stats_daily).
type StatCounter string

// The counters the code names. Each counts recipients: a message to three
// recipients that are all delivered adds 3 to delivered. The list of
// counters itself is StatCounts: a constant here is only a name for one of
// its fields (TestStatCountersAreFields holds them to it).
const (
	StatAccepted     StatCounter = "accepted"
	StatDelivered    StatCounter = "delivered"
	StatDeferred     StatCounter = "deferred"
	StatBounced      StatCounter = "bounced"
	StatComplained   StatCounter = "complained"
	StatOpened       StatCounter = "opened"
	StatClicked      StatCounter = "clicked"
	StatUnsubscribed StatCounter = "unsubscribed"
)

// StatCounts are the counters of a day or a range, and the one definition
// of which counters exist: adding a counter is adding a field here (and its
// column in a migration). The API shows this struct as it is, so each field's
// doc is the API reference's.
type StatCounts struct {
	Accepted     int64 `bun:"accepted" json:"accepted" doc:"Recipients the platform accepted for sending."`
	Delivered    int64 `bun:"delivered" json:"delivered" doc:"Recipients whose server accepted the message."`
	Deferred     int64 `bun:"deferred" json:"deferred" doc:"Recipients whose delivery failed temporarily and is retried."`
	Bounced      int64 `bun:"bounced" json:"bounced" doc:"Recipients whose message bounced."`
	Complained   int64 `bun:"complained" json:"complained" doc:"Recipients who marked a message as spam."`
	Opened       int64 `bun:"opened" json:"opened" doc:"Recipients who opened a message (first open each)."`
	Clicked      int64 `bun:"clicked" json:"clicked" doc:"Recipients who clicked a link (first click each)."`
	Unsubscribed int64 `bun:"unsubscribed" json:"unsubscribed" doc:"Recipients who unsubscribed."`
}

// statCounters are the counters in StatCounts' order; statFields maps each
// to its field's index.
var statCounters, statFields = func() ([]StatCounter, map[StatCounter]int) {
	t := reflect.TypeFor[StatCounts]()
	names := make([]StatCounter, t.NumField())
	index := make(map[StatCounter]int, t.NumField())
	for i := range t.NumField() {
		names[i] = StatCounter(t.Field(i).Tag.Get("bun"))
		index[names[i]] = i
	}
	return names, index
}()

// StatCounters lists every counter in documentation order.
func StatCounters() []StatCounter { return slices.Clone(statCounters) }

// Valid reports whether c is a counter of the rollup. Only valid counters
// reach SQL, where a counter is a column name.
func (c StatCounter) Valid() bool {
	_, ok := statFields[c]
	return ok
}

// MaxStatsDays is the longest range Stats reads, in days, both ends included.
const MaxStatsDays = 90

// dayLayout is how a UTC day is written in email_stats_daily.day: a DATE
// literal on PostgreSQL, the whole value on SQLite (text that sorts like the
// date).
const dayLayout = "2006-01-02"

// Add adds o's counters to c.
func (c *StatCounts) Add(o StatCounts) {
	cv, ov := reflect.ValueOf(c).Elem(), reflect.ValueOf(o)
	for i := range cv.NumField() {
		cv.Field(i).SetInt(cv.Field(i).Int() + ov.Field(i).Int())
	}
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
	if n < 0 {
		return fmt.Errorf("stat counter %s: negative increment %d", counter, n)
	}
	count, err := statUpsert(counter, bun.SafeQuery("VALUES (?, ?, ?, ?, ?)", orgID, domainID, at.UTC().Format(dayLayout), n, statShard(db)))
	if err != nil || n == 0 {
		return err
	}
	_, err = db.NewRaw("?", count).Exec(ctx)
	return err
}

// statUpsert is the one statement every count goes through: it adds n to
// counter in the rollup row of each (organization_id, domain_id, day, n,
// shard) that rows yields (a VALUES list, or a SELECT inside a larger
// statement), with shard from statShard. The counter becomes a column name,
// so one that is not Valid is an error.
func statUpsert(counter StatCounter, rows schema.QueryWithArgs) (schema.QueryWithArgs, error) {
	if !counter.Valid() {
		return schema.QueryWithArgs{}, fmt.Errorf("unknown stat counter %q", counter)
	}
	return bun.SafeQuery("INSERT INTO email_stats_daily (organization_id, domain_id, day, ?0, shard) ?1 "+
		"ON CONFLICT (organization_id, domain_id, day, shard) DO UPDATE SET ?0 = email_stats_daily.?0 + excluded.?0",
		bun.Ident(string(counter)), rows), nil
}

// StatShards is how many rows hold one (organization, domain, day)'s
// counters. Each increment holds its row's lock until its transaction
// commits, and a busy domain's transactions count concurrently: spread over
// shard rows, they seldom wait on each other. Reads add the shards up.
const StatShards = 16

// statShard is the SQL expression of the shard row an increment in db goes
// to. On PostgreSQL it is the connection's (its backend's process id), so
// every increment of one transaction goes to the same row: a transaction
// that counted twice on two rows picked at random, locking them in its own
// order, deadlocked with another that locked the same two the other way
// round. SQLite has one writer at a time, so it needs one row only.
func statShard(db bun.IDB) schema.QueryWithArgs {
	if db.Dialect().Name() == dialect.PG {
		return bun.SafeQuery("pg_backend_pid() % ?", StatShards)
	}
	return bun.SafeQuery("0")
}

// Stats returns the organization's counters (of one domain when domainID is
// set) for every UTC day from start to end, both included, in order; days
// without a row count zero. It reads the rollup only: at most StatShards
// rows per domain and day.
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
