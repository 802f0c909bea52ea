package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/uptrace/bun"
	"github.com/uptrace/bun/schema"
)

// Sources of emails: how they came in.
const (
	SourceAPI   = "api"
	SourceBatch = "batch"
	SourceSMTP  = "smtp"
)

// Email statuses (docs/sending.md): queued until every recipient is final.
const (
	// EmailScheduled waits for its scheduled_at; EmailCanceled was canceled
	// before it (docs/sending.md).
	EmailScheduled = "scheduled"
	EmailQueued    = "queued"
	EmailSent      = "sent"
	EmailCanceled  = "canceled"
)

// Recipient statuses (docs/sending.md). queued and deferred are pending; the
// others are final.
const (
	RecipientQueued     = "queued"
	RecipientDeferred   = "deferred"
	RecipientDelivered  = "delivered"
	RecipientBounced    = "bounced"
	RecipientSuppressed = "suppressed"
)

// pendingRecipientStatuses are the statuses an attempt still sends to.
var pendingRecipientStatuses = []string{RecipientQueued, RecipientDeferred}

// Email is one email sent through the API. Content and SignedMessage hold
// personal data and are erased after the retention time; the envelope
// columns stay for the email's log.
type Email struct {
	bun.BaseModel `bun:"table:emails"`

	ID             string `bun:"id,pk"`
	OrganizationID int64  `bun:"organization_id,notnull"`
	DomainID       int64  `bun:"domain_id,notnull"`
	Status         string `bun:"status,notnull"`
	FromAddress    string `bun:"from_address,notnull"`
	// To and Cc are JSON arrays of the header addresses as given.
	To      AddressList `bun:"to_addresses,notnull"`
	Cc      AddressList `bun:"cc_addresses,notnull"`
	Subject string      `bun:"subject,notnull"`
	// Source is how the email came in (SourceAPI, SourceBatch, SourceSMTP).
	Source string `bun:"source,notnull"`
	// Content is the validated request as JSON or, for SourceSMTP, the
	// message as submitted (nil once erased).
	Content []byte `bun:"content"`
	// MessageIDHeader is the Message-ID field of a submitted message (the
	// client's when it wrote one); nil for API emails, whose Message-ID is
	// <id@domain>.
	MessageIDHeader *string `bun:"message_id_header"`
	// SignedMessage is the DKIM-signed message every attempt sends (nil
	// until the first delivery step builds it, and once erased).
	SignedMessage []byte  `bun:"signed_message"`
	DKIMSelector  *string `bun:"dkim_selector"`
	// EnvelopeSender is the MAIL FROM the email is sent with
	// (bounces+<id>.<tag>@<mailfrom subdomain>, docs/inbound.md), set by the
	// first delivery step; the inbound listener accepts bounces only at it.
	EnvelopeSender *string    `bun:"envelope_sender"`
	AcceptedAt     *time.Time `bun:"accepted_at"`
	// ScheduledAt is when a scheduled email is sent (nil: at once).
	ScheduledAt *time.Time `bun:"scheduled_at"`
	// The email's tracking, decided when it was accepted (docs/tracking.md).
	TrackOpens       bool `bun:"track_opens,notnull"`
	TrackClicks      bool `bun:"track_clicks,notnull"`
	TrackUnsubscribe bool `bun:"track_unsubscribe,notnull"`
	// Answered: the client got the email's id in an answer that committed
	// with the email (WithCommitHook), so it must be sent even if the API
	// process died before starting its workflow.
	Answered  bool       `bun:"answered,notnull"`
	CreatedAt time.Time  `bun:"created_at,notnull"`
	SentAt    *time.Time `bun:"sent_at"`
	ErasedAt  *time.Time `bun:"erased_at"`
}

// AddressList is a list of addresses stored as a JSON array (a display name
// may hold a comma, so the comma lists of other tables do not fit).
type AddressList []string

// Value implements driver.Valuer.
func (l AddressList) Value() (any, error) {
	if l == nil {
		l = AddressList{}
	}
	b, err := json.Marshal([]string(l))
	return string(b), err
}

// Scan implements sql.Scanner.
func (l *AddressList) Scan(src any) error {
	var raw []byte
	switch v := src.(type) {
	case string:
		raw = []byte(v)
	case []byte:
		raw = v
	case nil:
		*l = nil
		return nil
	default:
		return errors.New("address list: unexpected column type")
	}
	return json.Unmarshal(raw, (*[]string)(l))
}

// EmailRecipient is one envelope recipient and where its delivery stands.
type EmailRecipient struct {
	bun.BaseModel `bun:"table:email_recipients"`

	EmailID      string    `bun:"email_id,pk"`
	Position     int       `bun:"position,pk"`
	Address      string    `bun:"address,notnull"`
	Status       string    `bun:"status,notnull"`
	Attempts     int       `bun:"attempts,notnull"`
	SMTPCode     *int      `bun:"smtp_code"`
	LastResponse *string   `bun:"last_response"`
	UpdatedAt    time.Time `bun:"updated_at,notnull"`
	// SignedMessage is the recipient's own message when the email is
	// tracked (Email.Tracked); nil otherwise, and once erased. The lists
	// of recipients leave it behind (up to 50 messages of 10 MiB): the
	// delivery steps read HasMessage and fetch each message as its
	// transaction begins (RecipientMessage).
	SignedMessage []byte `bun:"signed_message"`
	HasMessage    bool   `bun:"has_message,scanonly"`
	// Opens counts the recipient's opens; the times are the first open,
	// click and unsubscribe (docs/tracking.md).
	Opens          int        `bun:"opens,notnull"`
	OpenedAt       *time.Time `bun:"opened_at"`
	ClickedAt      *time.Time `bun:"clicked_at"`
	UnsubscribedAt *time.Time `bun:"unsubscribed_at"`
}

// Tracked reports whether the email is sent as one message per recipient,
// with its own tracking links (docs/tracking.md).
func (e *Email) Tracked() bool { return e.TrackOpens || e.TrackClicks || e.TrackUnsubscribe }

// Final reports whether the recipient's delivery has ended.
func (r *EmailRecipient) Final() bool {
	return r.Status != RecipientQueued && r.Status != RecipientDeferred
}

// NewEmail is an email to store with its envelope recipients.
type NewEmail struct {
	Email      *Email
	Recipients []string
}

// CreateEmail stores an email and its recipients (all queued) in one
// transaction, with the commit hook of ctx (WithCommitHook), if any.
func (s *Store) CreateEmail(ctx context.Context, e *Email, recipients []string) error {
	return s.CreateEmails(ctx, []NewEmail{{Email: e, Recipients: recipients}})
}

// CreateEmails stores emails and their recipients in one transaction (a
// batch is all or nothing), with the commit hook of ctx, if any. An email
// with a ScheduledAt is scheduled, the others queued.
func (s *Store) CreateEmails(ctx context.Context, emails []NewEmail) error {
	at := now()
	var rows []EmailRecipient
	models := make([]*Email, len(emails))
	for i, n := range emails {
		e := n.Email
		// Answered may be set by the caller: SMTP submission answers with
		// the ids right after this commits.
		e.CreatedAt, e.Status, e.Answered = at, EmailQueued, e.Answered || hasCommitHook(ctx)
		if e.ScheduledAt != nil {
			e.Status = EmailScheduled
		}
		if e.Source == "" {
			e.Source = SourceAPI
		}
		models[i] = e
		for pos, addr := range n.Recipients {
			rows = append(rows, EmailRecipient{EmailID: e.ID, Position: pos, Address: addr, Status: RecipientQueued, UpdatedAt: at})
		}
	}
	// Without a commit hook, PostgreSQL stores the emails and their
	// recipients in one statement, all or nothing on its own: one round trip
	// instead of four (BEGIN, two INSERTs, COMMIT) on the API's hot path.
	if s.IsPostgres() && !hasCommitHook(ctx) {
		_, err := s.DB.NewInsert().With("new_emails", s.DB.NewInsert().Model(&models)).Model(&rows).Exec(ctx)
		return err
	}
	return s.DB.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		if _, err := tx.NewInsert().Model(&models).Exec(ctx); err != nil {
			return err
		}
		if _, err := tx.NewInsert().Model(&rows).Exec(ctx); err != nil {
			return err
		}
		return runCommitHook(ctx, tx)
	})
}

// MarkEmailsAnswered records that the client is given these emails' ids
// (a batch whose workflows did not all start): the sweep then starts them
// instead of removing them.
func (s *Store) MarkEmailsAnswered(ctx context.Context, ids []string) error {
	if len(ids) == 0 {
		return nil
	}
	_, err := s.DB.NewUpdate().Model((*Email)(nil)).Set("answered = ?", true).Where("id IN (?)", bun.List(ids)).Exec(ctx)
	return err
}

// RescheduleEmail moves a scheduled email's time.
func (s *Store) RescheduleEmail(ctx context.Context, id string, at time.Time) error {
	_, err := s.DB.NewUpdate().Model((*Email)(nil)).Set("scheduled_at = ?", at.UTC()).
		Where("id = ?", id).Where("status = ?", EmailScheduled).Exec(ctx)
	return err
}

// CancelEmail cancels a scheduled email: nothing is sent and its content is
// erased; its recipients stay queued, never attempted.
func (s *Store) CancelEmail(ctx context.Context, id string) error {
	_, err := s.DB.NewUpdate().Model((*Email)(nil)).Set("status = ?", EmailCanceled).
		Set("content = NULL").Set("signed_message = NULL").Set("erased_at = COALESCE(erased_at, ?)", now()).
		Where("id = ?", id).Where("status = ?", EmailScheduled).Exec(ctx)
	return err
}

// DeleteUnstartedEmail removes an email whose workflow could not be started,
// so a request answered 503 leaves nothing behind. Nothing refers to it yet:
// events and statistics are written only by the workflow's steps. It reports
// whether it removed the email: an email a workflow has accepted is left
// alone (false: its workflow did start, though its start may have looked
// failed to the caller), and an unknown id is ErrNotFound.
func (s *Store) DeleteUnstartedEmail(ctx context.Context, id string) (deleted bool, err error) {
	return s.deleteUnstarted(ctx, id, 0)
}

// DeleteEmailUnstartedFor is DeleteUnstartedEmail for the sweep of emails
// whose API process died before starting their workflow: it removes the
// email only once it has been found unstarted for at least age of the
// database's clock. The first call notes when (unstarted_since) and
// removes nothing. The email's created_at is the clock of the API host
// that stored it, and a sweep on a host whose clock is ahead took an email
// for old while its request was still starting it: removed, its workflow
// then found nothing to send, and the client held a 202 for it.
func (s *Store) DeleteEmailUnstartedFor(ctx context.Context, id string, age time.Duration) (deleted bool, err error) {
	if age <= 0 {
		return false, fmt.Errorf("email %s: the unstarted time must be positive, not %s", id, age)
	}
	return s.deleteUnstarted(ctx, id, age)
}

// deleteUnstarted removes the unaccepted email at once (age 0), or once it
// was noted unstarted at least age ago, noting it now if it was not.
func (s *Store) deleteUnstarted(ctx context.Context, id string, age time.Duration) (deleted bool, err error) {
	err = s.DB.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		var row struct {
			AcceptedAt *time.Time `bun:"accepted_at"`
			Noted      bool       `bun:"noted"`
			Due        bool       `bun:"due"`
		}
		q := tx.NewSelect().Model((*Email)(nil)).Column("accepted_at").
			ColumnExpr("unstarted_since IS NOT NULL AS noted").
			ColumnExpr("COALESCE(unstarted_since <= ?, FALSE) AS due", s.dbTime(age)).
			Where("id = ?", id)
		if s.IsPostgres() {
			q = q.For("UPDATE")
		}
		if err := q.Scan(ctx, &row); err != nil {
			return notFound(err, "email")
		}
		if row.AcceptedAt != nil {
			return nil
		}
		if age > 0 && !row.Noted {
			_, err := tx.NewUpdate().Model((*Email)(nil)).Set("unstarted_since = ?", s.dbTime(0)).Where("id = ?", id).Exec(ctx)
			return err
		}
		if age > 0 && !row.Due {
			return nil
		}
		if _, err := tx.NewDelete().Model((*EmailRecipient)(nil)).Where("email_id = ?", id).Exec(ctx); err != nil {
			return err
		}
		if _, err := tx.NewDelete().Model((*Email)(nil)).Where("id = ?", id).Exec(ctx); err != nil {
			return err
		}
		deleted = true
		return nil
	})
	return deleted && err == nil, err
}

// dbTime is the database's clock, ago earlier, as SQL: PostgreSQL's, which
// every API host shares; SQLite has one process, whose clock is the
// database's.
func (s *Store) dbTime(ago time.Duration) schema.QueryWithArgs {
	if s.IsPostgres() {
		return bun.SafeQuery("now() - make_interval(secs => ?)", ago.Seconds())
	}
	return bun.SafeQuery("?", now().Add(-ago))
}

// UnacceptedEmailsBefore returns up to limit emails created before cutoff
// that no workflow has accepted, oldest first, without their content: the
// emails the API's sweep asks Temporal about. It leaves out canceled emails
// (their workflow ended with nothing to send, and never accepts them) and
// emails whose workflow the sweep has seen (MarkEmailWorkflowsSeen), so
// emails that wait for their time or were canceled are asked about at most
// until their workflow is seen, and never fill the sweep's batches.
func (s *Store) UnacceptedEmailsBefore(ctx context.Context, cutoff time.Time, limit int) ([]Email, error) {
	emails := []Email{}
	// The conditions are those of the partial index emails_unaccepted_idx,
	// written as it is so both dialects use it.
	err := s.DB.NewSelect().Model(&emails).Column("id", "organization_id", "domain_id", "answered", "created_at", "scheduled_at").
		Where("accepted_at IS NULL").Where("workflow_seen_at IS NULL").Where("status <> ?", EmailCanceled).
		Where("created_at < ?", cutoff).
		OrderExpr("created_at").Limit(int64(limit)).Scan(ctx)
	return emails, err
}

// MarkEmailWorkflowsSeen records that the workflows of the emails exist (the
// API's sweep found or started them), so UnacceptedEmailsBefore no longer
// lists them. It is written by the sweep only, never on the way an email is
// sent.
func (s *Store) MarkEmailWorkflowsSeen(ctx context.Context, ids []string) error {
	return s.markWorkflowsSeen(ctx, (*Email)(nil), ids)
}

// markWorkflowsSeen sets workflow_seen_at, once, on the rows of model's
// table (emails, inbound messages) with the ids: a sweep found or started
// their workflows, and lists them no more.
func (s *Store) markWorkflowsSeen(ctx context.Context, model any, ids []string) error {
	if len(ids) == 0 {
		return nil
	}
	_, err := s.DB.NewUpdate().Model(model).Set("workflow_seen_at = ?", now()).
		Where("id IN (?)", bun.List(ids)).Where("workflow_seen_at IS NULL").Exec(ctx)
	return err
}

// EmailScope limits what a key sees of the organization's emails: a
// domain-scoped key sees its domain's only.
type EmailScope struct {
	OrganizationID int64
	DomainID       *int64
}

func (sc EmailScope) apply(q *bun.SelectQuery) *bun.SelectQuery {
	q = q.Where("organization_id = ?", sc.OrganizationID)
	if sc.DomainID != nil {
		q = q.Where("domain_id = ?", *sc.DomainID)
	}
	return q
}

// EmailInScope reads an email the scope may see, with its recipients in
// request order; any other id is ErrNotFound.
func (s *Store) EmailInScope(ctx context.Context, sc EmailScope, id string) (*Email, []EmailRecipient, error) {
	e := new(Email)
	if err := sc.apply(s.DB.NewSelect().Model(e).ExcludeColumn("content", "signed_message").Where("id = ?", id)).Scan(ctx); err != nil {
		return nil, nil, notFound(err, "email")
	}
	byEmail, err := s.recipientsOf(ctx, []string{e.ID})
	return e, byEmail[e.ID], err
}

// ListEmails pages through the emails the scope may see, newest first, with
// each email's recipients.
func (s *Store) ListEmails(ctx context.Context, sc EmailScope, page Page) ([]Email, map[string][]EmailRecipient, bool, error) {
	emails := []Email{}
	q := sc.apply(s.DB.NewSelect().Model(&emails).ExcludeColumn("content", "signed_message"))
	more, err := scanPage(ctx, q, &emails, "id", Descending, page)
	if err != nil || len(emails) == 0 {
		return emails, nil, more, err
	}
	ids := make([]string, len(emails))
	for i := range emails {
		ids[i] = emails[i].ID
	}
	byEmail, err := s.recipientsOf(ctx, ids)
	return emails, byEmail, more, err
}

// EmailRecipients lists an email's recipients in request order.
func (s *Store) EmailRecipients(ctx context.Context, emailID string) ([]EmailRecipient, error) {
	byEmail, err := s.recipientsOf(ctx, []string{emailID})
	return byEmail[emailID], err
}

func (s *Store) recipientsOf(ctx context.Context, ids []string) (map[string][]EmailRecipient, error) {
	var rows []EmailRecipient
	// The recipients' messages stay behind: only an attempt sends them.
	if err := s.DB.NewSelect().Model(&rows).ExcludeColumn("signed_message").Where("email_id IN (?)", bun.List(ids)).
		OrderExpr("email_id, position").Scan(ctx); err != nil {
		return nil, err
	}
	out := make(map[string][]EmailRecipient, len(ids))
	for _, r := range rows {
		out[r.EmailID] = append(out[r.EmailID], r)
	}
	return out, nil
}

// emailWithDomain is an email joined with its domain.
type emailWithDomain struct {
	Email  `bun:",extend"`
	Domain *Domain `bun:"rel:belongs-to,join:domain_id=id"`
}

// emailToPrepare is an email joined with its domain and that domain's
// active DKIM key.
type emailToPrepare struct {
	Email     `bun:",extend"`
	Domain    *Domain  `bun:"rel:belongs-to,join:domain_id=id"`
	ActiveKey *DKIMKey `bun:"rel:belongs-to,join:domain_id=domain_id"`
}

// EmailToPrepare is EmailForDelivery with the domain's active DKIM key (as
// DKIMKeyInState finds it; nil when there is none) in the same query: the
// first delivery step signs the message with it.
func (s *Store) EmailToPrepare(ctx context.Context, id string) (*Email, *Domain, *DKIMKey, error) {
	row := new(emailToPrepare)
	active := bun.SafeQuery(`"active_key"."id" = (?)`, keyInState(s.DB, bun.Ident("email.domain_id"), DKIMActive))
	err := s.DB.NewSelect().Model(row).Relation("Domain").
		RelationWithOpts("ActiveKey", bun.RelationOpts{AdditionalJoinOnConditions: []schema.QueryWithArgs{active}}).
		Where("?TableAlias.id = ?", id).Scan(ctx)
	if err != nil {
		return nil, nil, nil, notFound(err, "email")
	}
	if row.ActiveKey != nil && row.ActiveKey.ID == 0 {
		row.ActiveKey = nil
	}
	return &row.Email, row.Domain, row.ActiveKey, nil
}

// EmailForDelivery reads an email with its content and signed message, and
// its domain, for the delivery steps, in one query. A deleted email (its
// workflow started but the API answered 503) is ErrNotFound.
func (s *Store) EmailForDelivery(ctx context.Context, id string) (*Email, *Domain, error) {
	row := new(emailWithDomain)
	if err := s.DB.NewSelect().Model(row).Relation("Domain").Where("?TableAlias.id = ?", id).Scan(ctx); err != nil {
		return nil, nil, notFound(err, "email")
	}
	return &row.Email, row.Domain, nil
}

// Acceptance is what the first delivery step writes when it accepts an
// email (AcceptEmail).
type Acceptance struct {
	// EnvelopeSender is stored unless the email has one (emails sent
	// before tags keep theirs).
	EnvelopeSender string
	// Recipients are counted as accepted, the first time only.
	Recipients int
	// SignedMessage, when set, is stored with the Selector of the key that
	// signed it, unless a message is already stored or the email's content
	// was erased: a step retried after a crash sends what the first run
	// stored, so every attempt sends the same bytes.
	SignedMessage []byte
	Selector      string
}

// Accepted is what AcceptEmail leaves stored.
type Accepted struct {
	EnvelopeSender string
	// SignedMessage is the stored message, this run's or an earlier one's:
	// nil when none was given and none stored, and once the content is
	// erased.
	SignedMessage []byte
}

// AcceptEmail is the first delivery step's one write: a scheduled email
// whose time has come becomes queued, the envelope sender and the signed
// message are stored unless they are (the selector with the message), and
// the first time only, the email is marked accepted and its recipients are
// counted as accepted on the UTC day of that moment (a scheduled email's,
// when its time came). A second run changes nothing and returns what the
// first stored.
func (s *Store) AcceptEmail(ctx context.Context, id string, a Acceptance) (Accepted, error) {
	if a.Recipients < 0 {
		return Accepted{}, fmt.Errorf("email %s: negative recipient count %d", id, a.Recipients)
	}
	var stored Accepted
	var err error
	if s.IsPostgres() {
		stored, err = s.acceptEmailInOneStatement(ctx, id, a)
	} else {
		stored, err = s.acceptEmailInTx(ctx, id, a)
	}
	return stored, notFound(err, "email")
}

// acceptSet is the part of AcceptEmail's change to the email's row that a
// second run leaves as the first made it. Its expressions read the row as
// it was before the UPDATE, on both dialects.
func acceptSet(a Acceptance) schema.QueryWithArgs {
	return bun.SafeQuery(`status = CASE WHEN status = ? THEN ? ELSE status END,
		envelope_sender = COALESCE(envelope_sender, ?),
		dkim_selector = CASE WHEN ? AND signed_message IS NULL AND erased_at IS NULL THEN ? ELSE dkim_selector END,
		signed_message = CASE WHEN erased_at IS NULL THEN COALESCE(signed_message, ?) ELSE signed_message END`,
		EmailScheduled, EmailQueued, a.EnvelopeSender, a.SignedMessage != nil, a.Selector, a.SignedMessage)
}

// acceptEmailInOneStatement is AcceptEmail on PostgreSQL: one round trip
// and one commit, on the path every email takes (README, "Benchmarks").
// The sub-select locks the row and reads accepted_at as the last committed
// run left it, so of two runs of the step the second waits for the first
// and counts nothing.
func (s *Store) acceptEmailInOneStatement(ctx context.Context, id string, a Acceptance) (Accepted, error) {
	count, err := statUpsert(StatAccepted, bun.SafeQuery(
		"SELECT organization_id, domain_id, (accepted_at AT TIME ZONE 'UTC')::date, ?, ? FROM accepted WHERE first_time AND ? > 0",
		a.Recipients, statShard(s.DB), a.Recipients))
	if err != nil {
		return Accepted{}, err
	}
	var stored Accepted
	err = s.DB.NewRaw(`WITH accepted AS (
	UPDATE emails AS e SET ?, accepted_at = COALESCE(e.accepted_at, ?)
	FROM (SELECT id AS locked_id, accepted_at IS NULL AS first_time FROM emails WHERE id = ? FOR UPDATE) AS locked
	WHERE e.id = locked.locked_id
	RETURNING e.envelope_sender, e.signed_message, e.organization_id, e.domain_id, e.accepted_at, locked.first_time
), counted AS (?)
SELECT envelope_sender, signed_message FROM accepted`,
		acceptSet(a), now(), id, count).Scan(ctx, &stored.EnvelopeSender, &stored.SignedMessage)
	return stored, err
}

// acceptEmailInTx is AcceptEmail on SQLite, whose transactions serialise
// writers: the update reads accepted_at as the last run left it.
func (s *Store) acceptEmailInTx(ctx context.Context, id string, a Acceptance) (Accepted, error) {
	var stored Accepted
	err := s.DB.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		var row struct {
			EnvelopeSender string
			SignedMessage  []byte
			AcceptedAt     *time.Time
			OrganizationID int64
			DomainID       int64
		}
		err := tx.NewUpdate().Model((*Email)(nil)).Set("?", acceptSet(a)).Where("id = ?", id).
			Returning("envelope_sender, signed_message, accepted_at, organization_id, domain_id").Scan(ctx, &row)
		stored = Accepted{EnvelopeSender: row.EnvelopeSender, SignedMessage: row.SignedMessage}
		if err != nil || row.AcceptedAt != nil {
			return err
		}
		at := now()
		if _, err := tx.NewUpdate().Model((*Email)(nil)).Set("accepted_at = ?", at).Where("id = ?", id).Exec(ctx); err != nil {
			return err
		}
		return CountEmailEvent(ctx, tx, row.OrganizationID, row.DomainID, StatAccepted, at, a.Recipients)
	})
	return stored, err
}

// RecipientsForDelivery lists all of an email's recipients in request
// order, with HasMessage: the first delivery step counts them all and
// sends to those not final.
func (s *Store) RecipientsForDelivery(ctx context.Context, emailID string) ([]EmailRecipient, error) {
	var rows []EmailRecipient
	err := s.recipientsForDelivery(&rows).Where("email_id = ?", emailID).OrderExpr("position").Scan(ctx)
	return rows, err
}

// PendingRecipients lists the recipients an attempt still sends to, with
// HasMessage.
func (s *Store) PendingRecipients(ctx context.Context, emailID string) ([]EmailRecipient, error) {
	var rows []EmailRecipient
	err := s.recipientsForDelivery(&rows).Where("email_id = ?", emailID).
		Where("status IN (?)", bun.List(pendingRecipientStatuses)).OrderExpr("position").Scan(ctx)
	return rows, err
}

// recipientsForDelivery selects recipients with whether they have a message
// of their own, not the message.
func (s *Store) recipientsForDelivery(rows *[]EmailRecipient) *bun.SelectQuery {
	return s.DB.NewSelect().Model(rows).ExcludeColumn("signed_message").
		ColumnExpr("signed_message IS NOT NULL AS has_message")
}

// RecipientMessage is a recipient's own message (nil when it has none, or
// once erased).
func (s *Store) RecipientMessage(ctx context.Context, emailID string, position int) ([]byte, error) {
	var msg []byte
	err := s.DB.NewSelect().Model((*EmailRecipient)(nil)).Column("signed_message").
		Where("email_id = ?", emailID).Where("position = ?", position).Scan(ctx, &msg)
	return msg, notFound(err, "recipient")
}

// RecipientChange is the outcome of one attempt (or one decision) for one
// recipient.
type RecipientChange struct {
	Position int
	Status   string
	// Attempted counts an SMTP attempt; a recipient suppressed or bounced
	// before any attempt has none.
	Attempted bool
	SMTPCode  *int
	Response  string
}

// ChangeRecipient moves a pending recipient to the change's status and, in
// the same transaction, runs effects (storing the outcome's event, counting
// it, suppressing the address) with the recipient's status before the change.
// A recipient already final is left alone and effects do not run, so an
// outcome recorded once is never announced twice, however often the step
// that found it is retried. It reports whether the change was made.
func (s *Store) ChangeRecipient(ctx context.Context, emailID string, c RecipientChange, effects func(ctx context.Context, tx bun.IDB, before string) error) (bool, error) {
	return s.changeRecipientFrom(ctx, emailID, pendingRecipientStatuses, c, effects)
}

// ReviseRecipient is ChangeRecipient for an outcome learned after the
// recipient may already be final: a bounce reported after the recipient's
// server accepted the message moves a delivered (or still pending) recipient
// to bounced. A recipient already bounced or suppressed is left alone, so
// the same report twice, or a second report, announces nothing again.
func (s *Store) ReviseRecipient(ctx context.Context, emailID string, c RecipientChange, effects func(ctx context.Context, tx bun.IDB, before string) error) (bool, error) {
	from := append([]string{RecipientDelivered}, pendingRecipientStatuses...)
	return s.changeRecipientFrom(ctx, emailID, from, c, effects)
}

func (s *Store) changeRecipientFrom(ctx context.Context, emailID string, from []string, c RecipientChange, effects func(ctx context.Context, tx bun.IDB, before string) error) (bool, error) {
	changed := false
	err := s.DB.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		before, err := s.moveRecipient(ctx, tx, emailID, from, c)
		changed = err == nil
		if errors.Is(err, sql.ErrNoRows) {
			return nil
		}
		if err != nil || effects == nil {
			return err
		}
		return effects(ctx, tx, before)
	})
	return changed, err
}

// moveRecipient makes the change to the recipient if its status is one of
// from, and returns the status it had; sql.ErrNoRows when it had another.
// Two runs of the same step take turns on the row, so only one of them
// makes the change and runs its effects.
func (s *Store) moveRecipient(ctx context.Context, tx bun.Tx, emailID string, from []string, c RecipientChange) (string, error) {
	u := tx.NewUpdate().Model((*EmailRecipient)(nil)).Set("status = ?", c.Status).Set("updated_at = ?", now())
	if c.Attempted {
		u = u.Set("attempts = ?TableAlias.attempts + 1").Set("smtp_code = ?", c.SMTPCode).Set("last_response = ?", c.Response)
	} else {
		if c.SMTPCode != nil {
			u = u.Set("smtp_code = ?", c.SMTPCode)
		}
		if c.Response != "" {
			u = u.Set("last_response = ?", c.Response)
		}
	}
	current := tx.NewSelect().Model((*EmailRecipient)(nil)).Column("status").
		Where("email_id = ?", emailID).Where("position = ?", c.Position).
		Where("status IN (?)", bun.List(from))
	var before string
	if !s.IsPostgres() {
		// SQLite's immediate transactions already serialise writers.
		if err := current.Scan(ctx, &before); err != nil {
			return "", err
		}
		_, err := u.Where("email_id = ?", emailID).Where("position = ?", c.Position).Exec(ctx)
		return before, err
	}
	// On PostgreSQL the sub-select locks the row and reads its status as
	// the last committed change left it, and the update changes it: one
	// round trip for the two (an UPDATE's RETURNING only has the new row).
	err := u.TableExpr("(?) AS locked", current.Column("email_id", "position").For("UPDATE")).
		Where("?TableAlias.email_id = locked.email_id").Where("?TableAlias.position = locked.position").
		Returning("locked.status").Scan(ctx, &before)
	return before, err
}

// SettleEmail marks the email sent once no recipient is pending, and lists
// the webhook deliveries of its events that are still pending, so that the
// step that settles it starts them, and a step retried after a crash starts
// what the crash left unstarted. Both are one statement on PostgreSQL.
func (s *Store) SettleEmail(ctx context.Context, emailID string) ([]string, error) {
	pending := s.DB.NewSelect().Model((*EmailRecipient)(nil)).ColumnExpr("1").Where("email_id = ?", emailID).
		Where("status IN (?)", bun.List(pendingRecipientStatuses))
	finish := s.DB.NewUpdate().Model((*Email)(nil)).Set("status = ?", EmailSent).Set("sent_at = ?", now()).
		Where("id = ?", emailID).Where("status = ?", EmailQueued).Where("NOT EXISTS (?)", pending)
	deliveries := s.pendingEmailDeliveries(emailID)
	var ids []string
	if s.IsPostgres() {
		err := deliveries.With("finished", finish).Scan(ctx, &ids)
		return ids, err
	}
	if _, err := finish.Exec(ctx); err != nil {
		return nil, err
	}
	err := deliveries.Scan(ctx, &ids)
	return ids, err
}

// EraseEmailContent erases the stored content and signed messages of an
// email (its own, and its recipients' when it is tracked).
func (s *Store) EraseEmailContent(ctx context.Context, emailID string) error {
	return s.DB.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		return eraseEmails(ctx, tx, []string{emailID})
	})
}

// EraseEmailsSentBefore erases, as EraseEmailContent does, up to limit
// emails sent before cutoff and not erased yet, oldest first: the retention
// sweep (docs/sending.md, "Retention"). It reports how many it erased.
// Sweeps of several processes may overlap: on PostgreSQL each takes emails
// the others have not locked, so that catching up on a backlog writes each
// email once and not once per worker; elsewhere (one process) an email
// erased twice keeps the time of the first.
func (s *Store) EraseEmailsSentBefore(ctx context.Context, cutoff time.Time, limit int) (int, error) {
	var ids []string
	err := s.DB.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		q := tx.NewSelect().Model((*Email)(nil)).Column("id").
			Where("erased_at IS NULL").Where("sent_at IS NOT NULL").Where("sent_at < ?", cutoff).
			OrderExpr("sent_at").Limit(int64(limit))
		if s.IsPostgres() {
			q = q.For("UPDATE SKIP LOCKED")
		}
		err := q.Scan(ctx, &ids)
		if err != nil || len(ids) == 0 {
			return err
		}
		return eraseEmails(ctx, tx, ids)
	})
	return len(ids), err
}

// UnsentEmail is an email never sent, as the retention sweep sees it.
type UnsentEmail struct {
	ID string `bun:"id"`
	// Accepted: a run of its workflow prepared it.
	Accepted bool `bun:"accepted"`
}

// UnsentEmailsCreatedBefore lists up to limit emails created before cutoff
// that were never sent and not erased, oldest first: the retention sweep
// asks Temporal whether their runs have ended (retention.EraseAbandoned).
func (s *Store) UnsentEmailsCreatedBefore(ctx context.Context, cutoff time.Time, limit int) ([]UnsentEmail, error) {
	rows := []UnsentEmail{}
	// The conditions are those of emails_unerased_unsent_idx.
	err := s.DB.NewSelect().Model((*Email)(nil)).Column("id").ColumnExpr("accepted_at IS NOT NULL AS accepted").
		Where("erased_at IS NULL").Where("sent_at IS NULL").Where("created_at < ?", cutoff).
		OrderExpr("created_at").Limit(int64(limit)).Scan(ctx, &rows)
	return rows, err
}

func eraseEmails(ctx context.Context, tx bun.Tx, ids []string) error {
	if _, err := tx.NewUpdate().Model((*Email)(nil)).
		Set("content = NULL").Set("signed_message = NULL").Set("erased_at = COALESCE(erased_at, ?)", now()).
		Where("id IN (?)", bun.List(ids)).Exec(ctx); err != nil {
		return err
	}
	_, err := tx.NewUpdate().Model((*EmailRecipient)(nil)).Set("signed_message = NULL").
		Where("email_id IN (?)", bun.List(ids)).Where("signed_message IS NOT NULL").Exec(ctx)
	return err
}

// PendingEmailDeliveries lists the webhook deliveries of an email's events
// that are still pending, so a step retried after a crash can start the
// delivery workflows the crash left unstarted.
func (s *Store) PendingEmailDeliveries(ctx context.Context, emailID string) ([]string, error) {
	var ids []string
	err := s.pendingEmailDeliveries(emailID).Scan(ctx, &ids)
	return ids, err
}

func (s *Store) pendingEmailDeliveries(emailID string) *bun.SelectQuery {
	return s.DB.NewSelect().TableExpr("deliveries AS d").Column("d.id").
		Join("JOIN events AS ev ON ev.id = d.event_id").
		Where("ev.message_id = ?", emailID).
		Where("substr(ev.event_id, 1, ?) = ?", len(EmailEventIDPrefix(emailID)), EmailEventIDPrefix(emailID)).
		Where("d.status = ?", DeliveryPending).OrderExpr("d.id")
}

// ownEventIDPrefix begins the event_id of every event Mailyard records
// itself.
const ownEventIDPrefix = "mailyard:"

// EmailEventIDPrefix starts the event_id of every outcome event of an email:
// "mailyard:<email_id>:<position>" is unique per recipient, which makes the
// outcome's event idempotent like any ingested event. An email's events are
// found by it exactly (not with LIKE, which ignores case on SQLite).
func EmailEventIDPrefix(emailID string) string { return ownEventIDPrefix + emailID + ":" }

// IsOwnEventID reports whether an event id is of the kind Mailyard gives
// the events it records itself, in any case: an ingested event may not
// take one.
func IsOwnEventID(id string) bool {
	return len(id) >= len(ownEventIDPrefix) && strings.EqualFold(id[:len(ownEventIDPrefix)], ownEventIDPrefix)
}
