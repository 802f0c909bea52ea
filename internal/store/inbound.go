package store

import (
	"context"
	"strings"
	"time"

	"github.com/uptrace/bun"
)

// Kinds of inbound messages (docs/inbound.md), in the order they are
// recognised; each is a label of mailyard_inbound_messages_total.
const (
	InboundDSN          = "dsn"
	InboundARF          = "arf"
	InboundARFOther     = "arf_other"
	InboundAutoReply    = "auto_reply"
	InboundLegacyBounce = "legacy_bounce"
	InboundUnsubscribe  = "unsubscribe"
	InboundUnrecognized = "unrecognized"
)

// InboundKinds lists every kind, for metrics that start at zero.
func InboundKinds() []string {
	return []string{InboundDSN, InboundARF, InboundARFOther, InboundAutoReply, InboundLegacyBounce, InboundUnsubscribe, InboundUnrecognized}
}

// InboundMessage is one message received at the bounce host. Raw and the
// addresses are personal data: Raw is erased after the retention time and
// none of it enters a workflow history.
type InboundMessage struct {
	bun.BaseModel `bun:"table:inbound_messages"`

	ID         string      `bun:"id,pk"`
	ReceivedAt time.Time   `bun:"received_at,notnull"`
	MailFrom   string      `bun:"mail_from,notnull"`
	Recipients AddressList `bun:"recipients,notnull"`
	// EmailID is the email whose envelope sender received the message, with
	// that email's organization and domain. For mail to fbl@ or
	// unsubscribe+…@ of the bounce host it is nil until the message is
	// handled, then the email a complaint named, if any
	// (MarkInboundHandled).
	EmailID        *string    `bun:"email_id"`
	OrganizationID *int64     `bun:"organization_id"`
	DomainID       *int64     `bun:"domain_id"`
	Size           int        `bun:"size,notnull"`
	Raw            []byte     `bun:"raw"`
	Kind           *string    `bun:"kind"`
	HandledAt      *time.Time `bun:"handled_at"`
	ErasedAt       *time.Time `bun:"erased_at"`
	// WorkflowSeenAt is when the sweep found or started the message's
	// workflow (MarkInboundWorkflowsSeen).
	WorkflowSeenAt *time.Time `bun:"workflow_seen_at"`
}

// CreateInboundMessage stores a received message; the listener answers 250
// only after this commits.
func (s *Store) CreateInboundMessage(ctx context.Context, m *InboundMessage) error {
	m.ReceivedAt = now()
	m.Size = len(m.Raw)
	_, err := s.DB.NewInsert().Model(m).Exec(ctx)
	return err
}

// InboundMessageByID reads a received message with its raw bytes.
func (s *Store) InboundMessageByID(ctx context.Context, id string) (*InboundMessage, error) {
	m := new(InboundMessage)
	err := s.DB.NewSelect().Model(m).Where("id = ?", id).Scan(ctx)
	return m, notFound(err, "inbound message")
}

// MarkInboundHandled records what a message was and, for a message to the
// bounce host itself, whose email it concerned (emailID, with its
// organization and domain; "" for none), and reports whether this call did
// (the first handling wins: a step retried after a crash keeps what the
// first run recorded, and counts nothing again). The email is recorded so
// that a retried step, which finds the message handled, still knows which
// email's webhook deliveries to start.
func (s *Store) MarkInboundHandled(ctx context.Context, id, kind, emailID string, orgID, domainID int64) (bool, error) {
	q := s.DB.NewUpdate().Model((*InboundMessage)(nil)).Set("kind = ?", kind).Set("handled_at = ?", now()).
		Where("id = ?", id).Where("handled_at IS NULL")
	if emailID != "" {
		q = q.Set("email_id = COALESCE(email_id, ?)", emailID).
			Set("organization_id = COALESCE(organization_id, ?)", orgID).Set("domain_id = COALESCE(domain_id, ?)", domainID)
	}
	res, err := q.Exec(ctx)
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	return n == 1, err
}

// EraseInboundMessage erases a message's bytes and envelope addresses.
func (s *Store) EraseInboundMessage(ctx context.Context, id string) error {
	_, err := s.eraseInbound().Where("id = ?", id).Exec(ctx)
	return err
}

// EraseInboundHandledBefore erases, as EraseInboundMessage does, up to limit
// messages handled before cutoff and not erased yet, oldest first: the
// retention sweep (docs/inbound.md). It reports how many it erased.
func (s *Store) EraseInboundHandledBefore(ctx context.Context, cutoff time.Time, limit int) (int, error) {
	return s.eraseInboundBefore(ctx, true, cutoff, limit)
}

// EraseInboundUnhandledBefore is EraseInboundHandledBefore for the messages
// received before cutoff that were never handled: the retention sweep's
// second half. A message is handled within seconds of its arrival unless
// its run was terminated or failed for good; its bytes and addresses must
// not outlive the retention time for that (docs/inbound.md). Should its run
// still come, it finds the message erased and changes nothing
// (activities.Inbound.Handle).
func (s *Store) EraseInboundUnhandledBefore(ctx context.Context, cutoff time.Time, limit int) (int, error) {
	return s.eraseInboundBefore(ctx, false, cutoff, limit)
}

// eraseInboundBefore erases up to limit messages not erased yet, handled
// before cutoff (handled) or received before it and not handled, oldest
// first. The conditions are those of inbound_messages_unerased_handled_idx
// and inbound_messages_unerased_unhandled_idx.
func (s *Store) eraseInboundBefore(ctx context.Context, handled bool, cutoff time.Time, limit int) (int, error) {
	state, at := "handled_at IS NULL", "received_at"
	if handled {
		state, at = "handled_at IS NOT NULL", "handled_at"
	}
	due := s.DB.NewSelect().Model((*InboundMessage)(nil)).Column("id").
		Where("erased_at IS NULL").Where(state).Where("? < ?", bun.Ident(at), cutoff).
		OrderExpr("?", bun.Ident(at)).Limit(int64(limit))
	// Checked again on the row itself: a sweep of another process may have
	// erased it, or its run handled it, since the subquery read it.
	res, err := s.eraseInbound().Where("id IN (?)", due).Where("erased_at IS NULL").Where(state).Exec(ctx)
	if err != nil {
		return 0, err
	}
	n, err := res.RowsAffected()
	return int(n), err
}

func (s *Store) eraseInbound() *bun.UpdateQuery {
	return s.DB.NewUpdate().Model((*InboundMessage)(nil)).
		Set("raw = NULL").Set("mail_from = ''").Set("recipients = '[]'").
		Set("erased_at = COALESCE(erased_at, ?)", now())
}

// UnhandledInboundBefore lists up to limit messages received before cutoff
// that are not handled yet and whose workflow the sweep has not seen
// (MarkInboundWorkflowsSeen), oldest first, without their bytes: the
// inbound sweep starts their workflows (Temporal was unreachable when they
// arrived).
func (s *Store) UnhandledInboundBefore(ctx context.Context, cutoff time.Time, limit int) ([]InboundMessage, error) {
	rows := []InboundMessage{}
	// The conditions are those of the partial index
	// inbound_messages_unhandled_idx.
	err := s.DB.NewSelect().Model(&rows).Column("id", "email_id", "organization_id", "domain_id", "received_at").
		Where("handled_at IS NULL").Where("workflow_seen_at IS NULL").Where("received_at < ?", cutoff).
		OrderExpr("received_at").Limit(int64(limit)).Scan(ctx)
	return rows, err
}

// MarkInboundWorkflowsSeen records that the workflows of the messages exist
// (the sweep found or started them), so UnhandledInboundBefore no longer
// lists them: a run that ended without handling its message (an operator
// terminated it) cannot be started again under its id, and asking about it
// every pass would keep newer messages out of the sweep's batches.
func (s *Store) MarkInboundWorkflowsSeen(ctx context.Context, ids []string) error {
	return s.markWorkflowsSeen(ctx, (*InboundMessage)(nil), ids)
}

// EmailEnvelope reads what the inbound listener and its workflow need of an
// email: ids, the envelope sender and the subject, never the content; and
// the name of its sending domain.
func (s *Store) EmailEnvelope(ctx context.Context, id string) (*Email, string, error) {
	e := new(Email)
	err := s.DB.NewSelect().Model(e).Column("id", "organization_id", "domain_id", "subject", "envelope_sender", "status").
		Where("id = ?", id).Scan(ctx)
	if err != nil {
		return nil, "", notFound(err, "email")
	}
	var domain string
	err = s.DB.NewSelect().Model((*Domain)(nil)).Column("domain").Where("id = ?", e.DomainID).Scan(ctx, &domain)
	return e, domain, err
}

// SameAddress compares two addresses the way the inbound listener does:
// case-insensitively, local part included (senders and reporting servers
// change its case; Mailyard's own local parts are case-insensitive).
func SameAddress(a, b string) bool {
	return strings.EqualFold(strings.TrimSpace(a), strings.TrimSpace(b))
}

// NoteRecipientResponse records a report about a recipient that changes
// nothing else (a DSN's Action: delayed). A bounced or suppressed recipient
// is left alone, as ReviseRecipient leaves it: reports arrive in any order,
// and a late "delayed" must not replace the response that made it final.
func (s *Store) NoteRecipientResponse(ctx context.Context, emailID string, position int, response string) error {
	_, err := s.DB.NewUpdate().Model((*EmailRecipient)(nil)).Set("last_response = ?", response).Set("updated_at = ?", now()).
		Where("email_id = ?", emailID).Where("position = ?", position).
		Where("status IN (?)", bun.List(append([]string{RecipientDelivered}, pendingRecipientStatuses...))).Exec(ctx)
	return err
}
