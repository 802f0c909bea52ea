// Package email is the per-email delivery workflow: one workflow
// "email-delivery:<email_id>" builds and signs the message once, then walks
// the retry schedule, one SMTP attempt per step for the recipients still
// pending, until every recipient is delivered, bounced or suppressed, and
// ends. The worker's retention sweep erases the message later
// (internal/retention); runs started before that change keep it for the
// retention time and erase it themselves.
//
// This file is the contract shared by the API (which starts the workflow) and
// the worker (which runs it). Everything that crosses Temporal is an id, a
// count or a duration: addresses, subjects and bodies stay in the database,
// where the activities read them (docs/sending.md).
package email

import (
	"context"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"

	"github.com/mailyard/mailyard/internal/searchattr"
)

// TaskQueue is where email workflows and their activities run.
const TaskQueue = "mailyard-emails"

// Registered type names; they are part of the recorded histories and never
// change.
const (
	WorkflowName    = "EmailDelivery"
	PrepareActivity = "PrepareEmail"
	AttemptActivity = "AttemptEmail"
	EraseActivity   = "EraseEmail"
	// FirstAttemptActivity prepares the email and makes its first attempt in
	// one local activity (since the local-first-attempt change).
	FirstAttemptActivity = "PrepareAndAttemptEmail"
	// RescheduleActivity and CancelActivity record what the updates of a
	// scheduled email decided.
	RescheduleActivity = "RescheduleEmail"
	CancelActivity     = "CancelEmail"
	WorkflowIDPrefix   = "email-delivery:"
)

// Updates of a scheduled email's workflow (docs/sending.md): the workflow
// alone decides whether sending has begun, so a reschedule or cancel that
// races the timer is either applied before it fires or refused.
const (
	RescheduleUpdate = "reschedule"
	CancelUpdate     = "cancel"
	// NotScheduledError is the type of the error an update is refused with
	// once sending has begun (or for an email that was never scheduled).
	NotScheduledError = "EmailNotScheduled"
	// MovedTooOftenError is the type of the error a reschedule is refused
	// with once the email has been moved MaxReschedules times.
	MovedTooOftenError = "EmailMovedTooOften"
)

// MaxReschedules is how many times one email may be moved. Temporal takes
// at most 2,000 accepted updates in a run, and past that refuses every new
// one, a cancel included; refused ones do not count, so this keeps the
// cancel possible however often a client moves the email (docs/sending.md).
var MaxReschedules = 1000

// RescheduleInput moves a scheduled email.
type RescheduleInput struct {
	ScheduledAt time.Time `json:"scheduled_at"`
}

// RescheduleActivityInput records the new time.
type RescheduleActivityInput struct {
	EmailID     string    `json:"email_id"`
	ScheduledAt time.Time `json:"scheduled_at"`
}

// CancelInput cancels a scheduled email.
type CancelInput struct {
	EmailID string `json:"email_id"`
}

// WorkflowID is the business key of an email's workflow.
func WorkflowID(emailID string) string { return WorkflowIDPrefix + emailID }

// DefaultSchedule is the wait before each attempt (docs/sending.md): ten
// attempts over about 24 hours. Every wait but the first gets ±20 % jitter.
var DefaultSchedule = []time.Duration{
	0,
	time.Minute,
	5 * time.Minute,
	15 * time.Minute,
	30 * time.Minute,
	time.Hour,
	2 * time.Hour,
	4 * time.Hour,
	8 * time.Hour,
	8 * time.Hour,
}

// DefaultRetention is how long the message is kept after the email is sent
// (MAILYARD_EMAIL_RETENTION).
const DefaultRetention = 7 * 24 * time.Hour

// Input starts an email's workflow. The starter fills in the schedule in
// force when the email was accepted, so that changing a default never
// changes an email already on its way. Retention is read only by runs that
// began before they ended when settled (and by a worker of that code during
// a rolling deploy, which is why starters still fill it in); the retention
// sweep erases with the retention time in force.
type Input struct {
	EmailID   string          `json:"email_id"`
	Schedule  []time.Duration `json:"schedule"`
	Retention time.Duration   `json:"retention"`
	// ScheduledAt, when set, is when the email is sent: the workflow
	// waits on a durable timer until then, and the message is built and
	// signed after it (so a key rotation meanwhile signs with the new key).
	ScheduledAt *time.Time `json:"scheduled_at,omitempty"`
	// Version is the version of the workflow the run takes, written by its
	// starter (Start: CurrentVersion), in place of the one version marker
	// runs record otherwise. 0 (runs started before it was written): the
	// run reads its version from that marker.
	Version int `json:"version,omitempty"`
}

// CurrentVersion is the version Start writes into a new run's Input: the
// version of one-version-marker whose runs end when the email is settled.
const CurrentVersion = closeWhenSettledVersion

// Starting is one start of a stored email's workflow.
type Starting struct {
	EmailID string
	// Owner gives the run its search attributes.
	Owner searchattr.Owner
	// Schedule (empty: DefaultSchedule), Retention and ScheduledAt are the
	// run's Input.
	Schedule    []time.Duration
	Retention   time.Duration
	ScheduledAt *time.Time
	// Eager asks the server to hand the first workflow task straight back
	// to a worker of the starting process (Temporal's eager workflow
	// start), for a process whose worker shares its client, as `mailyard
	// dev`; otherwise the start is an ordinary one.
	Eager bool
}

// Start starts the workflow of a stored email; every way of sending (the
// API, SMTP submission, the sweep of emails whose start failed) starts it
// here. A second start of the same email joins its run while it is open,
// and is refused once it has ended.
func Start(ctx context.Context, tc client.Client, s Starting) error {
	schedule := s.Schedule
	if len(schedule) == 0 {
		schedule = DefaultSchedule
	}
	opts := client.StartWorkflowOptions{
		ID: WorkflowID(s.EmailID), TaskQueue: TaskQueue,
		TypedSearchAttributes: s.Owner.Attributes(), StaticSummary: s.Owner.Summary("email " + s.EmailID),
		WorkflowIDReusePolicy:    enumspb.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE,
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
		EnableEagerStart:         s.Eager,
	}
	_, err := tc.ExecuteWorkflow(ctx, opts, WorkflowName,
		Input{EmailID: s.EmailID, Schedule: schedule, Retention: s.Retention, ScheduledAt: s.ScheduledAt, Version: CurrentVersion})
	return err
}

// PrepareInput asks the first step to build, sign and store the message.
type PrepareInput struct {
	EmailID string `json:"email_id"`
}

// PrepareResult says how many recipients the attempts still send to.
type PrepareResult struct {
	// Gone: the email no longer exists (the API removed it after it could
	// not confirm the start); the workflow ends.
	Gone    bool `json:"gone,omitempty"`
	Pending int  `json:"pending"`
}

// FirstAttemptInput asks to prepare the email and, when Send is set (the
// schedule's first wait is zero), make its first attempt.
type FirstAttemptInput struct {
	EmailID string `json:"email_id"`
	Send    bool   `json:"send"`
	// Final is set when the schedule has one attempt only.
	Final bool `json:"final,omitempty"`
}

// FirstAttemptResult is the prepare step's result and, when the attempt was
// made, the attempt's.
type FirstAttemptResult struct {
	PrepareResult
	Attempted bool          `json:"attempted,omitempty"`
	Attempt   AttemptResult `json:"attempt"`
}

// AttemptInput asks for one SMTP attempt to the pending recipients.
type AttemptInput struct {
	EmailID string `json:"email_id"`
	// Attempt counts from 1.
	Attempt int `json:"attempt"`
	// Final is set on the schedule's last attempt: recipients still
	// deferred after it are bounced (soft).
	Final bool `json:"final"`
}

// AttemptResult counts the recipients by what the attempt did to them.
type AttemptResult struct {
	Delivered int `json:"delivered"`
	Bounced   int `json:"bounced"`
	Deferred  int `json:"deferred"`
	// Pending is how many recipients the next attempt still sends to.
	Pending int `json:"pending"`
}

// EraseInput asks to erase the stored message.
type EraseInput struct {
	EmailID string `json:"email_id"`
}

// Statuses the workflow ends with.
const (
	StatusSent     = "sent"
	StatusGone     = "gone"
	StatusCanceled = "canceled"
)

// Result ends the workflow.
type Result struct {
	Status   string `json:"status"`
	Attempts int    `json:"attempts"`
}
