// Package keyusage records when each API key was last used (last_used_at,
// docs/credentials.md), off the path of the request or SMTP command that used
// it: the API and SMTP submission each run a Recorder.
package keyusage

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/mailyard/mailyard/internal/store"
)

// Interval is how often last_used_at may be written per key (docs/credentials.md).
const Interval = time.Minute

// Recorder writes last_used_at off the request path. A use only drops the key
// id into a buffered channel (or nowhere, when the key was recorded within the
// interval); Run does the writes, and the conditional UPDATE keeps several
// processes to one write per interval between them.
type Recorder struct {
	store  *store.Store
	logger *slog.Logger
	queue  chan int64
	clock  func() time.Time

	mu     sync.Mutex
	queued map[int64]time.Time // keys recorded (or on their way) and when
}

// New returns a Recorder writing to st; run it with Run.
func New(st *store.Store, logger *slog.Logger) *Recorder {
	return &Recorder{
		store:  st,
		logger: logger,
		queue:  make(chan int64, 1024),
		clock:  func() time.Time { return time.Now().UTC() },
		queued: map[int64]time.Time{},
	}
}

// Seen notes a use of a key whose stored last_used_at is lastUsed. It never
// blocks, and a nil Recorder records nothing.
func (u *Recorder) Seen(keyID int64, lastUsed *time.Time) {
	if u == nil {
		return
	}
	now := u.clock()
	if lastUsed != nil && now.Sub(*lastUsed) < Interval {
		return
	}
	u.mu.Lock()
	if at, ok := u.queued[keyID]; ok && now.Sub(at) < Interval {
		u.mu.Unlock()
		return
	}
	u.queued[keyID] = now
	u.mu.Unlock()
	select {
	case u.queue <- keyID:
	default: // full: losing one timestamp beats slowing a request
		u.mu.Lock()
		delete(u.queued, keyID)
		u.mu.Unlock()
	}
}

// Run writes queued uses until ctx ends.
func (u *Recorder) Run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case id := <-u.queue:
			writeCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
			if _, err := u.store.TouchAPIKey(writeCtx, id, u.clock().Truncate(time.Microsecond), Interval); err != nil {
				u.logger.WarnContext(ctx, "recording API key use failed", "key_id", id, "error", err)
			}
			cancel()
			u.forgetOld()
		}
	}
}

// forgetOld keeps the map from growing with keys not seen for a while.
func (u *Recorder) forgetOld() {
	u.mu.Lock()
	defer u.mu.Unlock()
	if len(u.queued) < 4096 {
		return
	}
	now := u.clock()
	for id, at := range u.queued {
		if now.Sub(at) >= Interval {
			delete(u.queued, id)
		}
	}
}
