package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/uptrace/bun"

	"github.com/mailyard/mailyard/internal/domainname"
)

// Reasons a recipient is suppressed.
const (
	SuppressionHardBounce = "hard_bounce"
	SuppressionComplaint  = "complaint"
	// SuppressionUnsubscribe stops only the emails sent with unsubscribe
	// on, the mail one can opt out of (docs/tracking.md): password resets
	// and receipts still arrive.
	SuppressionUnsubscribe = "unsubscribe"
)

// maxEmailLength bounds a stored address, in characters: the 320 the API
// accepts for a recipient (RFC 5321: 64 + 1 + 255, and then some).
const maxEmailLength = 320

// Suppression is one recipient on an organization's suppression list: the
// sending pipeline no longer sends to it. Email is personal data: it is
// shown to the organization and never logged.
type Suppression struct {
	bun.BaseModel `bun:"table:suppressions"`

	ID             int64     `bun:"id,pk,autoincrement"`
	OrganizationID int64     `bun:"organization_id,notnull"`
	Email          string    `bun:"email,notnull"`
	Reason         string    `bun:"reason,notnull"`
	CreatedAt      time.Time `bun:"created_at,notnull"`
}

// NormalizeEmail is the form in which the suppression list stores and
// compares addresses: trimmed and lower-cased entirely. Only the domain part is
// case-insensitive by the standard (RFC 5321 lets the receiving server decide
// on the local part), but no real mailbox provider tells Ada@ from ada@; one
// row per address whatever its case is what a customer expects of a
// suppression list, and it errs towards not sending. An internationalized
// domain is written in its IDNA (xn--) form, as recipients' addresses are
// stored: a complaint ingested for ada@bücher.example must stop mail to
// ada@xn--bcher-kva.example.
func NormalizeEmail(email string) string {
	email = caseFolded(email)
	at := strings.LastIndexByte(email, '@')
	if at < 0 {
		return email
	}
	if domain, err := domainname.NormalizeHost(email[at+1:]); err == nil {
		return email[:at+1] + domain
	}
	return email
}

// caseFolded is an address trimmed and lower-cased: NormalizeEmail's form
// before it wrote domains in their IDNA form.
func caseFolded(email string) string { return strings.ToLower(strings.TrimSpace(email)) }

// Suppress adds email to the organization's list. It is idempotent: an
// existing entry keeps its first reason and created_at, except that a hard
// bounce or complaint replaces an unsubscribe (it stops more mail). Call it
// inside the transaction that records the event.
func Suppress(ctx context.Context, db bun.IDB, orgID int64, email, reason string) error {
	if reason != SuppressionHardBounce && reason != SuppressionComplaint && reason != SuppressionUnsubscribe {
		return fmt.Errorf("suppression reason %q: want %s, %s or %s", reason, SuppressionHardBounce, SuppressionComplaint, SuppressionUnsubscribe)
	}
	if !suppressible(email) {
		// No address in the message: it is personal data.
		return errors.New("suppressed address must be 1 to 320 characters")
	}
	email = NormalizeEmail(email)
	_, err := db.NewInsert().Model(&Suppression{OrganizationID: orgID, Email: email, Reason: reason, CreatedAt: now()}).
		On("CONFLICT (organization_id, email) DO UPDATE").Set("reason = EXCLUDED.reason").
		Where("?TableAlias.reason = ?", SuppressionUnsubscribe).Where("EXCLUDED.reason <> ?", SuppressionUnsubscribe).
		Exec(ctx)
	return err
}

// suppressible says whether email, normalised, can be a suppression: 1 to
// maxEmailLength characters.
func suppressible(email string) bool {
	n := NormalizeEmail(email)
	return n != "" && utf8.RuneCountInString(n) <= maxEmailLength
}

// SuppressedAmong returns which of emails are on the organization's list,
// compared in NormalizeEmail's form; entries for an unsubscribe count only
// when withUnsubscribes is set (the email is sent with unsubscribe on). The
// map is keyed by the strings as given and holds only the suppressed ones.
func (s *Store) SuppressedAmong(ctx context.Context, orgID int64, emails []string, withUnsubscribes bool) (map[string]bool, error) {
	out := map[string]bool{}
	if len(emails) == 0 {
		return out, nil
	}
	byNormal := make(map[string][]string, len(emails))
	for _, e := range emails {
		n := NormalizeEmail(e)
		byNormal[n] = append(byNormal[n], e)
	}
	normal := make([]string, 0, len(byNormal))
	for n := range byNormal {
		normal = append(normal, n)
	}
	var found []string
	q := s.DB.NewSelect().Model((*Suppression)(nil)).Column("email").
		Where("organization_id = ?", orgID).Where("email IN (?)", bun.List(normal))
	if !withUnsubscribes {
		q = q.Where("reason <> ?", SuppressionUnsubscribe)
	}
	if err := q.Scan(ctx, &found); err != nil {
		return nil, err
	}
	for _, n := range found {
		for _, e := range byNormal[n] {
			out[e] = true
		}
	}
	return out, nil
}

// ListSuppressions returns a page of the organization's list, oldest (lowest
// id) first, and whether more follow. Page.After is a suppression id (int64).
func (s *Store) ListSuppressions(ctx context.Context, orgID int64, page Page) ([]Suppression, bool, error) {
	rows := []Suppression{}
	q := s.DB.NewSelect().Model(&rows).Where("organization_id = ?", orgID)
	more, err := scanPage(ctx, q, &rows, "id", Ascending, page)
	return rows, more, err
}

// DeleteSuppression removes email (in NormalizeEmail's form) from the
// organization's list and returns the removed entry; ErrNotFound when it is
// not on the list (or only on another organization's). An entry stored
// before domains were written in their IDNA form (lower-cased only, e.g.
// ada@bücher.example) is removed too: the list shows it so, and its owner
// could otherwise never take it off.
func (s *Store) DeleteSuppression(ctx context.Context, orgID int64, email string) (*Suppression, error) {
	forms := []string{NormalizeEmail(email)}
	if before := caseFolded(email); before != forms[0] {
		forms = append(forms, before)
	}
	var removed []Suppression
	err := s.DB.NewDelete().Model(&removed).
		Where("organization_id = ?", orgID).Where("email IN (?)", bun.List(forms)).
		Returning("*").Scan(ctx)
	if err == nil && len(removed) == 0 {
		err = sql.ErrNoRows
	}
	if err != nil {
		return nil, notFound(err, "suppression")
	}
	// Both forms of one address: the current one is the entry's.
	for i := range removed {
		if removed[i].Email == forms[0] {
			return &removed[i], nil
		}
	}
	return &removed[0], nil
}
