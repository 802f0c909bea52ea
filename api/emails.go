package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/mail"
	"strings"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/google/uuid"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"golang.org/x/sync/errgroup"

	"github.com/mailyard/mailyard/internal/apperr"
	"github.com/mailyard/mailyard/internal/eventtype"
	"github.com/mailyard/mailyard/internal/mailmsg"
	"github.com/mailyard/mailyard/internal/searchattr"
	"github.com/mailyard/mailyard/internal/store"
	"github.com/mailyard/mailyard/workflows/email"
)

// maxEmailBodyBytes is the body limit of Send email (10 MiB, docs/sending.md);
// every other route keeps maxBodyBytes.
const maxEmailBodyBytes = 10 << 20

// emailBodyReadTimeout is how long the sends may take to read their body:
// the HTTP server's ReadTimeout (cmd/mailyard), where Huma's default of 5 s
// failed a 10 MiB body slower than 17 Mbit/s.
const emailBodyReadTimeout = 30 * time.Second

// Addresses is a recipient field: one address as a string, or an array.
type Addresses []string

// UnmarshalJSON accepts a string or an array of strings; null is no
// address, as the field left out.
func (a *Addresses) UnmarshalJSON(b []byte) error {
	if string(bytes.TrimSpace(b)) == "null" {
		*a = nil
		return nil
	}
	var one string
	if err := json.Unmarshal(b, &one); err == nil {
		*a = Addresses{one}
		return nil
	}
	return json.Unmarshal(b, (*[]string)(a))
}

// Schema documents the field as a string or an array of strings. The
// limits are in the description, and checked by mailmsg.Validate: there a
// refusal names the entry (body.to[3]) beside the request's other problems,
// where the schema's would name the field alone, and hide the others.
func (Addresses) Schema(huma.Registry) *huma.Schema {
	str := &huma.Schema{Type: huma.TypeString}
	return &huma.Schema{
		Description: "One address (`addr` or `Name <addr>`) or an array of them: at most 50 entries, each of at most 998 characters.",
		OneOf:       []*huma.Schema{str, {Type: huma.TypeArray, Items: str}},
	}
}

// EmailAttachment is one attachment of Send email.
type EmailAttachment struct {
	Filename    string `json:"filename" maxLength:"255" doc:"At most 255 bytes of UTF-8." example:"invoice.pdf"`
	Content     string `json:"content" doc:"The file, base64 (standard alphabet)."`
	ContentType string `json:"content_type,omitempty" doc:"MIME type; application/octet-stream when absent." example:"application/pdf"`
}

// EmailBody is one email to send: the body of Send email, an item of Send
// emails in a batch.
type EmailBody struct {
	From        string            `json:"from" maxLength:"998" doc:"addr or Name <addr>; the domain is the key's domain or a subdomain of it." example:"Acme <billing@example.com>"`
	To          Addresses         `json:"to,omitempty"`
	Cc          Addresses         `json:"cc,omitempty"`
	Bcc         Addresses         `json:"bcc,omitempty"`
	ReplyTo     Addresses         `json:"reply_to,omitempty"`
	Subject     string            `json:"subject" maxLength:"998" doc:"1 to 998 characters, no line breaks." example:"Your invoice"`
	Text        string            `json:"text,omitempty" doc:"Plain-text body; text, html or both."`
	HTML        string            `json:"html,omitempty" doc:"HTML body; text, html or both."`
	Headers     map[string]string `json:"headers,omitempty" doc:"Extra headers: X-… names, List-Unsubscribe, List-Unsubscribe-Post, In-Reply-To, References; at most 50, of 16 KiB in all."`
	Attachments []EmailAttachment `json:"attachments,omitempty" maxItems:"100"`
	ScheduledAt string            `json:"scheduled_at,omitempty" maxLength:"64" doc:"Send at this time instead of now: RFC 3339 with a time-zone offset or Z, at most 30 days ahead; up to 5 minutes in the past means now." example:"2026-12-01T09:00:00+01:00"`
	Tracking    *EmailTracking    `json:"tracking,omitempty" doc:"Opens, clicks and unsubscribe for this email, over the domain's settings; with any on, each recipient gets a message of their own."`
}

// SendEmailInput is the body of Send email.
type SendEmailInput struct {
	Body EmailBody
}

// SendEmailBatchInput is the body of Send emails in a batch.
type SendEmailBatchInput struct {
	Body []EmailBody `minItems:"1" maxItems:"100"`
}

// QueuedEmail is data.email of Send email.
type QueuedEmail struct {
	ID          string     `json:"id" format:"uuid"`
	Status      string     `json:"status" enum:"queued,scheduled"`
	ScheduledAt *time.Time `json:"scheduled_at,omitempty"`
	CreatedAt   time.Time  `json:"created_at"`
}

// QueuedEmails is the data of Send emails in a batch.
type QueuedEmails struct {
	Emails []QueuedEmail `json:"emails" doc:"One per email of the request, in its order."`
}

// RescheduleEmailInput moves a scheduled email.
type RescheduleEmailInput struct {
	EmailIDInput
	Body struct {
		ScheduledAt string `json:"scheduled_at" minLength:"1" maxLength:"64" doc:"The new time: RFC 3339 with a time-zone offset or Z, at most 30 days ahead." example:"2026-12-01T09:00:00+01:00"`
	}
}

// QueuedEmailData is the data of Send email.
type QueuedEmailData struct {
	Email QueuedEmail `json:"email"`
}

// EmailRecipient is where one recipient's delivery stands.
type EmailRecipient struct {
	Email        string    `json:"email"`
	Status       string    `json:"status" enum:"queued,deferred,delivered,bounced,suppressed"`
	Attempts     int       `json:"attempts"`
	LastResponse *string   `json:"last_response" doc:"The receiving server's last answer (code and text), or why nothing was sent."`
	UpdatedAt    time.Time `json:"updated_at"`
}

// Email is an email as Get email and List emails show it.
type Email struct {
	ID      string   `json:"id" format:"uuid"`
	From    string   `json:"from"`
	To      []string `json:"to"`
	Cc      []string `json:"cc"`
	Subject string   `json:"subject"`
	Status  string   `json:"status" enum:"scheduled,queued,sent,canceled" doc:"scheduled until its scheduled_at, queued until every recipient is delivered, bounced or suppressed, then sent; canceled if it was canceled while scheduled."`
	// ScheduledAt is set for scheduled emails.
	ScheduledAt *time.Time `json:"scheduled_at,omitempty" doc:"When a scheduled email is (or was to be) sent."`
	Source      string     `json:"source" enum:"api,batch,smtp" doc:"How the email came in: this API, a batch, or SMTP submission."`
	// MessageIDHeader is shown for SMTP emails, which keep the client's.
	MessageIDHeader *string          `json:"message_id_header,omitempty" doc:"The Message-ID field of an email submitted over SMTP (the client's, when it wrote one)."`
	CreatedAt       time.Time        `json:"created_at"`
	Recipients      []EmailRecipient `json:"recipients"`
}

// EmailData is the data of Get email.
type EmailData struct {
	Email Email `json:"email"`
}

// EmailList is the data of List emails.
type EmailList struct {
	Emails []Email `json:"emails"`
	PageInfo
}

// EmailIDInput names an email in the path.
type EmailIDInput struct {
	ID string `path:"id" doc:"Email id (a UUID; any other value is an unknown email, 404)."`
}

// ListEmailsInput pages through the emails.
type ListEmailsInput struct {
	PageQuery
}

func emailFromStore(e *store.Email, recipients []store.EmailRecipient) Email {
	out := Email{ID: e.ID, From: e.FromAddress, To: nonNil(e.To), Cc: nonNil(e.Cc), Subject: e.Subject,
		Status: e.Status, Source: e.Source, MessageIDHeader: e.MessageIDHeader, ScheduledAt: utcPtr(e.ScheduledAt),
		CreatedAt: e.CreatedAt.UTC(), Recipients: make([]EmailRecipient, 0, len(recipients))}
	for _, r := range recipients {
		out.Recipients = append(out.Recipients, EmailRecipient{
			Email: r.Address, Status: r.Status, Attempts: r.Attempts, LastResponse: r.LastResponse, UpdatedAt: r.UpdatedAt.UTC(),
		})
	}
	return out
}

func nonNil(l []string) []string {
	if l == nil {
		return []string{}
	}
	return l
}

func (s *Server) registerEmails() {
	tags := []string{"Emails"}
	register(s, huma.Operation{
		OperationID: "send-email", Method: http.MethodPost, Path: "/api/v1/emails", DefaultStatus: http.StatusAccepted,
		Summary: "Send email", Tags: tags,
		Description: "Queues an email from the key's verified domain: Mailyard builds the message once, signs it with the domain's active DKIM key " +
			"and delivers it to each recipient's mail server, retrying deferred recipients for about a day. Needs a key with the send permission " +
			"scoped to a domain; bodies up to 10 MiB. Each recipient's outcome arrives as a delivered or bounced webhook event.",
		MaxBodyBytes:    maxEmailBodyBytes + 1,
		BodyReadTimeout: emailBodyReadTimeout,
		Metadata:        map[string]any{permissionMetadata: PermissionSend},
		Errors:          []int{http.StatusConflict, http.StatusUnprocessableEntity, http.StatusBadRequest, http.StatusRequestEntityTooLarge},
	}, s.sendEmail)
	register(s, huma.Operation{
		OperationID: "send-email-batch", Method: http.MethodPost, Path: "/api/v1/emails/batch", DefaultStatus: http.StatusAccepted,
		Summary: "Send emails in a batch", Tags: tags,
		Description: "Queues 1 to 100 emails (each as Send email's body, scheduled_at and attachments included; 10 MiB in all) in one request. " +
			"Every email is validated first: if any is invalid, none is sent and the 422 names each problem as body[i].field. " +
			"Otherwise they are stored together and data.emails lists their ids in the order given.",
		MaxBodyBytes:    maxEmailBodyBytes + 1,
		BodyReadTimeout: emailBodyReadTimeout,
		Metadata:        map[string]any{permissionMetadata: PermissionSend},
		Errors:          []int{http.StatusConflict, http.StatusUnprocessableEntity, http.StatusBadRequest, http.StatusRequestEntityTooLarge},
	}, s.sendEmailBatch)
	register(s, huma.Operation{
		OperationID: "reschedule-email", Method: http.MethodPatch, Path: "/api/v1/emails/{id}",
		Summary: "Reschedule email", Tags: tags,
		Description: "Moves a scheduled email to another time; as when sending, a time in the past by at most 5 minutes means now (it is sent at once). " +
			"Once its sending has begun (or for an email that was not scheduled): 409 email_not_scheduled. " +
			fmt.Sprintf("An email moves at most %d times; the next move is 409 conflict (cancel it and send it again).", email.MaxReschedules),
		Metadata: map[string]any{permissionMetadata: PermissionSend},
		Errors:   []int{http.StatusNotFound, http.StatusConflict, http.StatusUnprocessableEntity},
	}, s.rescheduleEmail)
	register(s, huma.Operation{
		OperationID: "cancel-email", Method: http.MethodPost, Path: "/api/v1/emails/{id}/cancel",
		Summary: "Cancel email", Tags: tags,
		Description: "Cancels a scheduled email: nothing is sent and its content is erased; status canceled. A cancel of an email already canceled answers it again. Once its sending has begun (or for an email that was not scheduled): 409 email_not_scheduled.",
		Metadata:    map[string]any{permissionMetadata: PermissionSend},
		Errors:      []int{http.StatusNotFound, http.StatusConflict},
	}, s.cancelEmail)
	register(s, huma.Operation{
		OperationID: "list-emails", Method: http.MethodGet, Path: "/api/v1/emails",
		Summary: "List emails", Tags: tags,
		Description: "Emails newest first, a page at a time (default 20). A domain-scoped key sees its domain's emails only.",
		Metadata:    map[string]any{permissionMetadata: []string{PermissionSend, PermissionAdmin}},
		Errors:      []int{http.StatusUnprocessableEntity},
	}, s.listEmails)
	register(s, huma.Operation{
		OperationID: "get-email", Method: http.MethodGet, Path: "/api/v1/emails/{id}",
		Summary: "Get email", Tags: tags,
		Description: "An email and where each recipient's delivery stands.",
		Metadata:    map[string]any{permissionMetadata: []string{PermissionSend, PermissionAdmin}},
		Errors:      []int{http.StatusNotFound, http.StatusUnprocessableEntity},
	}, s.getEmail)
	register(s, huma.Operation{
		OperationID: "list-email-events", Method: http.MethodGet, Path: "/api/v1/emails/{id}/events",
		Summary: "List email events", Tags: tags,
		Description: "Every event of an email, oldest first, whatever produced it: delivered and bounced outcomes of the SMTP conversation, " +
			"bounces and complaints reported later by mail, and ingested events. A page at a time (default 20).",
		Metadata: map[string]any{permissionMetadata: []string{PermissionSend, PermissionAdmin}},
		Errors:   []int{http.StatusNotFound, http.StatusUnprocessableEntity},
	}, s.listEmailEvents)
}

// sendingDomain is the domain of a send key.
func (s *Server) sendingDomain(ctx context.Context) (*store.Domain, error) {
	p := principalFrom(ctx)
	if p.SendingDomainID == nil {
		return nil, newError(CodeForbidden, "sending needs a key scoped to a sending domain; this key is organization-wide")
	}
	if p.SendingDomain != nil {
		return p.SendingDomain, nil
	}
	// Deleted since the key was made: the store says so in its words.
	return s.store.DomainInOrganization(ctx, p.OrganizationID, *p.SendingDomainID)
}

// newEmail validates one email's body and returns it ready to store, or its
// problems located under at ("body", or "body[3]" in a batch).
func newEmail(b EmailBody, orgID int64, d *store.Domain, at string, now time.Time) (store.NewEmail, []ErrorDetail) {
	attachments := make([]mailmsg.Attachment, len(b.Attachments))
	for i, a := range b.Attachments {
		attachments[i] = mailmsg.Attachment{Filename: a.Filename, Content: a.Content, ContentType: a.ContentType}
	}
	msg, problems := mailmsg.Validate(mailmsg.Request{
		From: b.From, To: b.To, Cc: b.Cc, Bcc: b.Bcc, ReplyTo: b.ReplyTo, Subject: b.Subject,
		Text: b.Text, HTML: b.HTML, Headers: b.Headers, Attachments: attachments,
	}, d.Domain)
	var details []ErrorDetail
	for _, pr := range problems {
		details = append(details, ErrorDetail{Location: at + strings.TrimPrefix(pr.Location, "body"), Message: pr.Message})
	}
	scheduledAt, problem := parseScheduledAt(b.ScheduledAt, now)
	if problem != "" {
		details = append(details, ErrorDetail{Location: at + ".scheduled_at", Message: problem})
	}
	if len(details) > 0 {
		return store.NewEmail{}, details
	}
	content, err := json.Marshal(msg)
	if err != nil {
		return store.NewEmail{}, []ErrorDetail{{Location: at, Message: err.Error()}}
	}
	e := &store.Email{
		ID: uuid.Must(uuid.NewV7()).String(), OrganizationID: orgID, DomainID: d.ID,
		FromAddress: displayAddress(msg.From), To: addressStrings(msg.To), Cc: addressStrings(msg.Cc),
		Subject: msg.Subject, Content: content, ScheduledAt: scheduledAt,
	}
	return store.NewEmail{Email: e, Recipients: msg.Recipients()}, nil
}

// Limits of scheduled_at (docs/sending.md).
const (
	maxScheduleAhead = 30 * 24 * time.Hour
	maxScheduleLate  = 5 * time.Minute
)

// parseScheduledAt reads scheduled_at: nil for none, or for a time in the
// past by at most maxScheduleLate (sent now); else a problem to report.
func parseScheduledAt(v string, now time.Time) (*time.Time, string) {
	if v == "" {
		return nil, ""
	}
	t, err := time.Parse(time.RFC3339, v)
	if err != nil {
		return nil, "must be an RFC 3339 time with a time-zone offset or Z, e.g. 2026-12-01T09:00:00+01:00"
	}
	switch {
	case t.After(now.Add(maxScheduleAhead)):
		return nil, "must be at most 30 days ahead"
	case t.Before(now.Add(-maxScheduleLate)):
		return nil, "is more than 5 minutes in the past"
	case !t.After(now):
		return nil, ""
	}
	t = t.UTC()
	return &t, ""
}

func queued(e *store.Email) QueuedEmail {
	return QueuedEmail{ID: e.ID, Status: e.Status, ScheduledAt: utcPtr(e.ScheduledAt), CreatedAt: e.CreatedAt.UTC()}
}

func utcPtr(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}

func (s *Server) sendEmail(ctx context.Context, in *SendEmailInput) (*Response[QueuedEmailData], error) {
	d, err := s.sendingDomain(ctx)
	if err != nil {
		return nil, err
	}
	n, details := newEmail(in.Body, principalFrom(ctx).OrganizationID, d, "body", time.Now())
	if len(details) > 0 {
		return nil, newError(CodeValidationFailed, "validation failed", details...)
	}
	if err := s.applyTracking(n.Email, in.Body.Tracking, d); err != nil {
		return nil, err
	}
	// Checked after the body, so a client learns about both kinds of problem
	// from the first answer it can act on.
	if d.Status != store.DomainVerified {
		return nil, newError(CodeDomainNotVerified, "the key's domain "+d.Domain+" is "+d.Status+"; only verified domains send")
	}
	e := n.Email
	answer := func() *Response[QueuedEmailData] { return respond(QueuedEmailData{Email: queued(e)}) }
	// With an Idempotency-Key the answer commits with the email: a retry after
	// this process dies gets the same email, whose workflow the sweep starts
	// if this process could not (SweepUnstartedEmails).
	txCtx := s.answerInTx(ctx, http.StatusAccepted, func() any { return answer().Body })
	if err := s.store.CreateEmail(txCtx, e, n.Recipients); err != nil {
		return nil, err
	}
	if err := s.startEmail(ctx, e); err != nil {
		s.logger.WarnContext(ctx, "the start of a stored email's workflow failed; removing the email unless its workflow accepted it", "request_id", RequestID(ctx), "email_id", e.ID, "error", err)
		// Nothing has been sent or counted yet: removing the email (and the
		// answer stored with it) leaves no trace, and the client can send the
		// same request again.
		undo := context.WithoutCancel(ctx)
		deleted, derr := s.store.DeleteUnstartedEmail(undo, e.ID)
		if derr == nil && !deleted {
			// The start failed on this side only (e.g. its answer timed out):
			// the workflow runs and has accepted the email. It is on its way,
			// so the answer (and the one stored with the email) stands.
			s.logger.InfoContext(ctx, "the email's workflow started after all; answering it", "request_id", RequestID(ctx), "email_id", e.ID)
			return answer(), nil
		}
		if derr != nil {
			// The email stays, and the sweep finishes it: one whose answer
			// committed with it (an Idempotency-Key) is started, so it is
			// answered, and the client's retry replays the same email
			// instead of sending a second; any other is removed, and the
			// 503 below holds.
			s.logger.ErrorContext(ctx, "remove unstarted email", "email_id", e.ID, "error", derr)
			if e.Answered {
				return answer(), nil
			}
			// Not "nothing was sent": a start whose answer only was
			// lost leaves a workflow, and the sweep then sends the email.
			return nil, newError(CodeUnavailable, "the email could not be queued for certain and may still be sent; "+
				"send requests with an Idempotency-Key to retry them safely")
		} else if uerr := s.undoAnswerInTx(undo); uerr != nil {
			s.logger.ErrorContext(ctx, "forget the answer of a removed email", "email_id", e.ID, "error", uerr)
		}
		return nil, newError(CodeUnavailable, "the email could not be queued; nothing was sent, send it again")
	}
	return answer(), nil
}

// batchStarts is how many workflows of a batch start at once.
const batchStarts = 16

// sendEmailBatch validates every email, stores them all in one transaction
// and starts their workflows concurrently. The answer promises every email:
// those whose workflow did not start now are marked answered before it goes
// out, so the sweep starts them. Until then they are as unanswered as a
// single send's email: a process that dies before the answer leaves them to
// the sweep to remove, and only those whose workflow had started go twice
// when the client, which got no answer, sends the batch again (with an
// Idempotency-Key the answer commits with the emails, and a retry replays
// it: none goes twice).
func (s *Server) sendEmailBatch(ctx context.Context, in *SendEmailBatchInput) (*Response[QueuedEmails], error) {
	d, err := s.sendingDomain(ctx)
	if err != nil {
		return nil, err
	}
	orgID, now := principalFrom(ctx).OrganizationID, time.Now()
	emails := make([]store.NewEmail, len(in.Body))
	var details []ErrorDetail
	for i, b := range in.Body {
		n, problems := newEmail(b, orgID, d, fmt.Sprintf("body[%d]", i), now)
		emails[i], details = n, append(details, problems...)
	}
	if len(details) > 0 {
		return nil, newError(CodeValidationFailed, "validation failed; no email of the batch was sent", details...)
	}
	for i, n := range emails {
		if err := s.applyTracking(n.Email, in.Body[i].Tracking, d); err != nil {
			return nil, err
		}
	}
	if d.Status != store.DomainVerified {
		return nil, newError(CodeDomainNotVerified, "the key's domain "+d.Domain+" is "+d.Status+"; only verified domains send")
	}
	for _, n := range emails {
		n.Email.Source = store.SourceBatch
	}
	answer := func() *Response[QueuedEmails] {
		out := QueuedEmails{Emails: make([]QueuedEmail, len(emails))}
		for i, n := range emails {
			out.Emails[i] = queued(n.Email)
		}
		return respond(out)
	}
	txCtx := s.answerInTx(ctx, http.StatusAccepted, func() any { return answer().Body })
	if err := s.store.CreateEmails(txCtx, emails); err != nil {
		return nil, err
	}
	// The starts share one start's time: with Temporal slow or away, 100
	// emails started 16 at a time, each waiting its own 30 s, would keep the
	// client past the server's write time-out, and a client that got no
	// answer sends the batch again. What is not started by then, the sweep
	// starts.
	startCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.startTimeout)
	defer cancel()
	var g errgroup.Group
	g.SetLimit(batchStarts)
	started := make([]bool, len(emails))
	for i, n := range emails {
		g.Go(func() error {
			if startCtx.Err() != nil {
				return nil
			}
			if err := s.startEmail(startCtx, n.Email); err != nil {
				s.logger.WarnContext(ctx, "batch email stored, its workflow not started yet (the sweep will)", "request_id", RequestID(ctx), "email_id", n.Email.ID, "error", err)
				return nil
			}
			started[i] = true
			return nil
		})
	}
	_ = g.Wait()
	var unstarted []string
	for i, n := range emails {
		if !started[i] && !n.Email.Answered {
			unstarted = append(unstarted, n.Email.ID)
		}
	}
	if err := s.store.MarkEmailsAnswered(context.WithoutCancel(ctx), unstarted); err != nil {
		s.logger.ErrorContext(ctx, "mark a batch's unstarted emails answered", "request_id", RequestID(ctx), "error", err)
		return nil, newError(CodeUnavailable, "the batch could not be queued for certain: its emails whose workflow started are sent, "+
			"the others are removed; send batches with an Idempotency-Key to retry them safely")
	}
	return answer(), nil
}

// rescheduleEmail moves a scheduled email: the email's workflow decides, in
// its reschedule update, whether sending has begun.
func (s *Server) rescheduleEmail(ctx context.Context, in *RescheduleEmailInput) (*Response[EmailData], error) {
	now := time.Now().UTC()
	at, problem := parseScheduledAt(in.Body.ScheduledAt, now)
	if problem == "" && at == nil {
		// As when sending: a time in the past by at most 5 minutes means
		// now (a client whose clock is a little behind, asking to send).
		at = &now
	}
	if problem != "" {
		return nil, fieldError("body.scheduled_at", problem)
	}
	return s.updateScheduled(ctx, in.ID, email.RescheduleUpdate, email.RescheduleInput{ScheduledAt: *at})
}

// cancelEmail cancels a scheduled email through its workflow's cancel update.
func (s *Server) cancelEmail(ctx context.Context, in *EmailIDInput) (*Response[EmailData], error) {
	return s.updateScheduled(ctx, in.ID, email.CancelUpdate)
}

// updateScheduled sends an update to a scheduled email's workflow and
// answers the email as it then stands. A refusal (sending has begun, the
// email was never scheduled, its workflow has ended) is 409
// email_not_scheduled, but for a cancel of an email already canceled,
// which answers the email again: a client whose first cancel got no answer
// may send it again. A scheduled email stored and answered whose workflow
// has not started yet (its start failed; the sweep would start it) gets
// its workflow started first: refused, the cancel would be followed by the
// sweep's start, and the email sent.
func (s *Server) updateScheduled(ctx context.Context, id, update string, args ...any) (*Response[EmailData], error) {
	id, ok := canonicalUUID(id)
	if !ok {
		return nil, apperr.NotFoundf("email")
	}
	scope := emailScope(principalFrom(ctx))
	e, _, err := s.store.EmailInScope(ctx, scope, id)
	if err != nil {
		return nil, err
	}
	err = s.askWorkflow(ctx, id, update, args)
	var notFound *serviceerror.NotFound
	if errors.As(err, &notFound) && e.Answered && e.Status == store.EmailScheduled {
		if err := s.startEmail(ctx, e); err != nil {
			return nil, err
		}
		err = s.askWorkflow(ctx, id, update, args)
	}
	var app *temporal.ApplicationError
	if errors.As(err, &app) && app.Type() == email.MovedTooOftenError {
		return nil, apperr.Errorf(apperr.Conflict, "email",
			"the email has been moved %d times, the most an email may be; cancel it and send it again", email.MaxReschedules)
	}
	refused := errors.As(err, &app) && app.Type() == email.NotScheduledError || errors.As(err, &notFound)
	if err != nil && !refused {
		return nil, err
	}
	// The email as it now stands: the answer, and for a refusal whether
	// it is a cancel of an email already canceled.
	e, recipients, err := s.store.EmailInScope(ctx, scope, id)
	if refused && (err != nil || update != email.CancelUpdate || e.Status != store.EmailCanceled) {
		return nil, newError(CodeEmailNotScheduled, "the email is not scheduled, or its sending has begun")
	}
	if err != nil {
		return nil, err
	}
	return respond(EmailData{Email: emailFromStore(e, recipients)}), nil
}

// askWorkflow sends update to the email's workflow and waits for its answer.
//
// Every cancel of an email carries the same update id: Temporal joins a
// cancel sent again (a client's retry after a 503, or two at once) to the one
// admitted, and answers it with that one's outcome. A cancel of its own
// would be refused by the workflow, which has taken the first one, while the
// first one's step has not yet stored the email canceled: a 409 for an
// email that is being canceled. Reschedules each move the email, so each
// gets an update id of its own.
func (s *Server) askWorkflow(ctx context.Context, id, update string, args []any) error {
	uctx, cancel := context.WithTimeout(ctx, s.startTimeout)
	defer cancel()
	var updateID string
	if update == email.CancelUpdate {
		updateID = email.CancelUpdate
	}
	h, err := s.temporal.UpdateWorkflow(uctx, client.UpdateWorkflowOptions{
		WorkflowID: email.WorkflowID(id), UpdateID: updateID, UpdateName: update, Args: args, WaitForStage: client.WorkflowUpdateStageCompleted,
	})
	if err != nil {
		return err
	}
	return h.Get(uctx, nil)
}

// startEmail starts the email's workflow with the schedule and retention in
// force now, so that changing a default never changes an email on its way.
func (s *Server) startEmail(ctx context.Context, e *store.Email) error {
	ctx, cancel := context.WithTimeout(ctx, s.startTimeout)
	defer cancel()
	owner := searchattr.Owner{OrganizationID: e.OrganizationID, DomainID: e.DomainID}
	return email.Start(ctx, s.temporal, email.Starting{EmailID: e.ID, Owner: owner, Schedule: s.emailSchedule,
		Retention: s.cfg.EmailRetention, ScheduledAt: e.ScheduledAt, Eager: s.eagerStart})
}

// addressStrings shows addresses as the client wrote them, "Name <addr>"
// without the RFC 2047 encoding the message header needs.
func addressStrings(addrs []mail.Address) []string {
	out := make([]string, len(addrs))
	for i, a := range addrs {
		out[i] = displayAddress(a)
	}
	return out
}

func displayAddress(a mail.Address) string {
	if a.Name == "" {
		return a.Address
	}
	return a.Name + " <" + a.Address + ">"
}

// emailScope is the emails a key sees: its organization's, bounded by its
// sending domain unless it has admin, which manages the whole organization
// whatever its domain (docs/credentials.md), as for the statistics.
func emailScope(p Principal) store.EmailScope {
	scope := store.EmailScope{OrganizationID: p.OrganizationID}
	if !p.Permissions.Has(PermissionAdmin) {
		scope.DomainID = p.SendingDomainID
	}
	return scope
}

func (s *Server) getEmail(ctx context.Context, in *EmailIDInput) (*Response[EmailData], error) {
	id, ok := canonicalUUID(in.ID)
	if !ok {
		return nil, apperr.NotFoundf("email")
	}
	e, recipients, err := s.store.EmailInScope(ctx, emailScope(principalFrom(ctx)), id)
	if err != nil {
		return nil, err
	}
	return respond(EmailData{Email: emailFromStore(e, recipients)}), nil
}

func (s *Server) listEmails(ctx context.Context, in *ListEmailsInput) (*Response[EmailList], error) {
	const list = "emails"
	page, err := storePage(in.PageQuery, list, defaultPageSize, canonicalUUID)
	if err != nil {
		return nil, err
	}
	rows, recipients, more, err := s.store.ListEmails(ctx, emailScope(principalFrom(ctx)), page)
	if err != nil {
		return nil, err
	}
	out := EmailList{Emails: make([]Email, 0, len(rows))}
	for i := range rows {
		out.Emails = append(out.Emails, emailFromStore(&rows[i], recipients[rows[i].ID]))
	}
	out.PageInfo, err = pageInfo(page, list, rows, more, func(e *store.Email) string { return e.ID })
	return respond(out), err
}

// EmailEvent is one event of an email as List email events shows it: what
// its webhook deliveries carry, with the event's id.
type EmailEvent struct {
	ID        int64          `json:"id" doc:"Increases with each event; the list is in this order."`
	EventType eventtype.Type `json:"event_type"`
	Timestamp time.Time      `json:"timestamp"`
	ToEmail   string         `json:"to_email"`
	Data      map[string]any `json:"data" doc:"The event's data, as its webhook deliveries carry it (docs/inbound.md lists the fields of each type)."`
}

// EmailEventList is the data of List email events.
type EmailEventList struct {
	Events []EmailEvent `json:"events"`
	PageInfo
}

// ListEmailEventsInput names the email and the page.
type ListEmailEventsInput struct {
	EmailIDInput
	PageQuery
}

func (s *Server) listEmailEvents(ctx context.Context, in *ListEmailEventsInput) (*Response[EmailEventList], error) {
	id, ok := canonicalUUID(in.ID)
	if !ok {
		return nil, apperr.NotFoundf("email")
	}
	// A cursor names its email: one of another email's events is refused.
	list := "emails/" + id + "/events"
	page, err := storePage(in.PageQuery, list, defaultPageSize, func(after int64) (int64, bool) { return after, after > 0 })
	if err != nil {
		return nil, err
	}
	rows, more, err := s.store.EmailEvents(ctx, emailScope(principalFrom(ctx)), id, page)
	if err != nil {
		return nil, err
	}
	out := EmailEventList{Events: make([]EmailEvent, 0, len(rows))}
	for i := range rows {
		out.Events = append(out.Events, emailEventFromStore(&rows[i]))
	}
	out.PageInfo, err = pageInfo(page, list, rows, more, func(e *store.Event) int64 { return e.ID })
	return respond(out), err
}

// emailEventFromStore shows an event with the data its deliveries carry; an
// event stored before bodies were kept shows the fields of its row.
func emailEventFromStore(e *store.Event) EmailEvent {
	out := EmailEvent{ID: e.ID, EventType: eventtype.Type(e.EventType), Timestamp: e.OccurredAt.UTC(), ToEmail: e.ToEmail}
	var body struct {
		Data map[string]any `json:"data"`
	}
	if e.Body != nil && json.Unmarshal(e.Body, &body) == nil && body.Data != nil {
		out.Data = body.Data
	} else {
		out.Data = map[string]any{"message_id": e.MessageID, "to_email": e.ToEmail, "subject": e.Subject}
	}
	return out
}
