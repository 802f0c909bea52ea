// Package delivery is the per-delivery webhook workflow: one workflow
// "webhook-delivery:<delivery_id>" walks the retry schedule, one activity
// attempt at a time, until the receiver accepts the event, the schedule runs
// out, or the webhook is gone.
//
// This file is the contract shared by the API (which starts the workflow) and
// the worker (which runs it). Everything that crosses Temporal is an id, a
// status or a duration: the URL, the signing secret and the event's personal
// data stay in the database, where the activity reads them.
package delivery

import (
	"context"
	"time"

	enumspb "go.temporal.io/api/enums/v1"

	"go.temporal.io/sdk/client"

	"github.com/mailyard/mailyard/internal/searchattr"
)

// TaskQueue is where delivery workflows and their activities run.
const TaskQueue = "mailyard-webhooks"

// WorkflowName and AttemptActivity are the registered type names; they are
// part of the recorded histories and never change.
const (
	WorkflowName    = "WebhookDelivery"
	AttemptActivity = "AttemptWebhookDelivery"
)

// WorkflowID is the business key of a delivery's workflow. A retry of the
// delivery is a new run under the same id.
func WorkflowID(deliveryID string) string { return "webhook-delivery:" + deliveryID }

// DefaultSchedule is the wait before each attempt (docs/webhooks.md): eight
// attempts over about 28 hours. Every wait but the first gets ±20 % jitter.
var DefaultSchedule = []time.Duration{
	0,
	5 * time.Second,
	5 * time.Minute,
	30 * time.Minute,
	2 * time.Hour,
	5 * time.Hour,
	10 * time.Hour,
	10 * time.Hour,
}

// Input starts a delivery's attempt series.
type Input struct {
	DeliveryID string `json:"delivery_id"`
	// Schedule overrides DefaultSchedule (tests and benchmarks shorten it).
	Schedule []time.Duration `json:"schedule,omitempty"`
	// Version is the version of the workflow the run takes, written by
	// Start (CurrentVersion), in place of the local-attempt version
	// marker runs record otherwise. 0 (runs started before it was
	// written): the run reads its version from that marker.
	Version int `json:"version,omitempty"`
}

// CurrentVersion is the version Start writes into a new run's Input: the
// version of local-attempt whose attempts are local activities.
const CurrentVersion = 1

// AttemptInput asks the activity for one attempt.
type AttemptInput struct {
	DeliveryID string `json:"delivery_id"`
	// Attempt counts from 1 within the series.
	Attempt int `json:"attempt"`
	// Final is set on the last attempt of the schedule: if it fails, the
	// delivery is failed.
	Final bool `json:"final"`
}

// Verdict is what an attempt means for the series.
type Verdict string

const (
	// Delivered: the receiver answered 2xx.
	Delivered Verdict = "delivered"
	// Retry: the attempt failed; the schedule goes on (or ends, if Final).
	Retry Verdict = "retry"
	// ReceiverGone: the receiver answered 410; the webhook is now disabled.
	ReceiverGone Verdict = "receiver_gone"
	// WebhookGone: the webhook was deleted or disabled before the attempt;
	// nothing was sent.
	WebhookGone Verdict = "webhook_gone"
	// AlreadyFinished: the delivery was already final (an attempt of a
	// crashed worker was recorded, then retried); nothing was sent.
	AlreadyFinished Verdict = "already_finished"
)

// AttemptResult is the activity's answer: statuses only.
type AttemptResult struct {
	Verdict Verdict `json:"verdict"`
	// StatusCode is the HTTP status, or 0 when no response arrived.
	StatusCode int `json:"status_code,omitempty"`
	// RetryAfter is what a 429 or 503 asked for, before clamping.
	RetryAfter time.Duration `json:"retry_after,omitempty"`
}

// Delivery statuses as the workflow reports them (the same words as the
// delivery log).
const (
	StatusDelivered = "delivered"
	StatusFailed    = "failed"
)

// Result ends the workflow.
type Result struct {
	Status   string  `json:"status"`
	Attempts int     `json:"attempts"`
	Verdict  Verdict `json:"verdict"`
}

// StartMode says what a start does when the delivery's workflow id already
// has a run.
type StartMode int

const (
	// JoinOpen joins an open run and refuses (AlreadyStarted) after a
	// closed one: the first start of a new delivery.
	JoinOpen StartMode = iota
	// OnlyIfIdle refuses (AlreadyStarted) while a run is open.
	OnlyIfIdle
)

// Starting is one start of a delivery's workflow.
type Starting struct {
	DeliveryID                string
	OrganizationID, WebhookID int64
	Mode                      StartMode
	// Eager asks the server to hand the first workflow task back to the
	// starter (a process whose worker shares its client, as `mailyard dev`).
	Eager bool
	// Memo is shown with the run (ids only), e.g. the recovery that
	// started it.
	Memo map[string]any
}

// Start starts a delivery's workflow as s says, at CurrentVersion.
func Start(ctx context.Context, c client.Client, s Starting, in Input) error {
	in.Version = CurrentVersion
	owner := searchattr.Owner{OrganizationID: s.OrganizationID, WebhookID: s.WebhookID}
	opts := client.StartWorkflowOptions{ID: WorkflowID(s.DeliveryID), TaskQueue: TaskQueue,
		TypedSearchAttributes: owner.Attributes(), StaticSummary: owner.Summary("delivery " + s.DeliveryID),
		EnableEagerStart: s.Eager, Memo: s.Memo}
	switch s.Mode {
	case JoinOpen:
		opts.WorkflowIDConflictPolicy = enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING
		opts.WorkflowIDReusePolicy = enumspb.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE
	case OnlyIfIdle:
		opts.WorkflowIDConflictPolicy = enumspb.WORKFLOW_ID_CONFLICT_POLICY_FAIL
		opts.WorkflowIDReusePolicy = enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE
		opts.WorkflowExecutionErrorWhenAlreadyStarted = true
	}
	_, err := c.ExecuteWorkflow(ctx, opts, WorkflowName, in)
	return err
}
