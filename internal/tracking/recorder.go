package tracking

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/uptrace/bun"

	"github.com/mailyard/mailyard/internal/deliveryruns"
	"github.com/mailyard/mailyard/internal/emailevent"
	"github.com/mailyard/mailyard/internal/eventtype"
	"github.com/mailyard/mailyard/internal/store"
	"github.com/mailyard/mailyard/internal/tracktoken"
	"github.com/mailyard/mailyard/internal/webhook"
)

// Recorder records what recipients do with tracked emails: the event (the
// first open of each recipient, the first click of each link per
// recipient, the unsubscribe), the statistics (per recipient) and, for an
// unsubscribe, the suppression, in one transaction and in that order; then
// it starts the webhook deliveries.
type Recorder struct {
	Store *store.Store
	Runs  *deliveryruns.Runs
}

// maxUserAgent bounds the user agent kept in an event, in bytes.
const maxUserAgent = 512

// Open records an open.
func (r *Recorder) Open(ctx context.Context, t tracktoken.Token, userAgent string) error {
	return r.record(ctx, t, store.EngagedOpen, eventtype.Opened, store.StatOpened, "", "open:"+strconv.Itoa(t.Recipient), userAgent)
}

// Click records a click on the link url.
func (r *Recorder) Click(ctx context.Context, t tracktoken.Token, url, userAgent string) error {
	return r.record(ctx, t, store.EngagedClick, eventtype.Clicked, store.StatClicked, url,
		"click:"+strconv.Itoa(t.Recipient)+":"+strconv.Itoa(t.Link), userAgent)
}

// Unsubscribe suppresses the recipient's address for mail sent with
// unsubscribe on. Repeating it changes nothing.
func (r *Recorder) Unsubscribe(ctx context.Context, t tracktoken.Token) error {
	return r.record(ctx, t, store.EngagedUnsubscribe, eventtype.Unsubscribed, store.StatUnsubscribed, "", "unsubscribe:"+strconv.Itoa(t.Recipient), "")
}

// record stores one engagement. The event's id names the recipient (and
// link), so the event is stored once however often it happens; the
// statistics count the recipient's first engagement of the kind. A token of
// an email that no longer exists records nothing.
func (r *Recorder) record(ctx context.Context, t tracktoken.Token, what store.Engagement, typ eventtype.Type,
	counter store.StatCounter, url, eventKey, userAgent string) error {
	// The envelope only: the content and messages are not needed here.
	e, domain, err := r.Store.EmailEnvelope(ctx, t.EmailID.String())
	if err != nil {
		return ignoreNotFound(err)
	}
	at := time.Now().UTC().Truncate(time.Microsecond)
	err = r.Store.DB.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		first, rcpt, err := store.RecordEngagement(ctx, tx, e.ID, t.Recipient, what, at)
		if err != nil {
			return err
		}
		if !first {
			counter = ""
		}
		data := webhook.EmailEventData{MessageID: e.ID, ToEmail: rcpt.Address, Subject: e.Subject, URL: url, UserAgent: cleanUserAgent(userAgent)}
		if _, err := emailevent.Record(ctx, tx, e, domain, store.EmailEventIDPrefix(e.ID)+eventKey, typ, counter, rcpt.Address, at, data); err != nil {
			return err
		}
		// The suppression last: every transaction that counts and
		// suppresses (a hard bounce, a complaint, an ingested event) locks
		// the statistics row before the suppression, and one that took
		// them the other way round deadlocked with it.
		// Only the first: once the customer has taken the address off
		// the list (a recipient who subscribed again), a repeated POST
		// of the old email's link (a mailbox provider sending it again)
		// must not put it back without an event or a count.
		if what == store.EngagedUnsubscribe && first {
			return store.Suppress(ctx, tx, e.OrganizationID, rcpt.Address, store.SuppressionUnsubscribe)
		}
		return nil
	})
	if err != nil {
		return ignoreNotFound(err)
	}
	return emailevent.StartDeliveries(ctx, r.Store, r.Runs, e.ID)
}

// cleanUserAgent keeps a printable, bounded user agent: it goes into
// webhooks and the event list. It cuts first, so it never copies more than
// maxUserAgent bytes of a header that may be 64 KiB, and it returns a copy:
// the routes queue the result, and a slice of the header would keep all of
// it in memory while the event waits.
func cleanUserAgent(ua string) string {
	if len(ua) > maxUserAgent {
		ua = ua[:maxUserAgent]
	}
	// Drops control characters and U+FFFD, and so any invalid UTF-8,
	// including a rune the cut split (Map reads it as U+FFFD).
	ua = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) || r == unicode.ReplacementChar {
			return -1
		}
		return r
	}, ua)
	return strings.Clone(strings.TrimSpace(ua))
}

// ignoreNotFound makes a token of an email (or recipient) that is gone a
// no-op: tokens outlive the emails they name.
func ignoreNotFound(err error) error {
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	return err
}
