// Package recovery is the webhook recovery workflow: one workflow
// "webhook-recovery:<webhook_id>:<uuid>" redelivers every failed delivery of
// a webhook created in a time window, oldest first, each once.
//
// This file is the contract shared by the API (which starts the workflow)
// and the worker (which runs it). Only ids, times and counts cross Temporal.
package recovery

import (
	"context"
	"fmt"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"

	"github.com/mailyard/mailyard/internal/searchattr"

	"github.com/mailyard/mailyard/workflows/delivery"
)

// TaskQueue is the webhook task queue: recovery starts delivery workflows.
const TaskQueue = delivery.TaskQueue

// Registered type names; they are part of recorded histories.
const (
	WorkflowName       = "WebhookRecovery"
	ListFailedActivity = "ListFailedDeliveries"
	RedeliverActivity  = "RedeliverDelivery"
)

// MaxWindow is how far back a recovery may reach.
const MaxWindow = 14 * 24 * time.Hour

// PageSize is how many delivery ids one ListFailed call returns.
const PageSize = 100

// WorkflowID is the business key of one recovery of a webhook.
func WorkflowID(webhookID int64, recoveryID string) string {
	return fmt.Sprintf("webhook-recovery:%d:%s", webhookID, recoveryID)
}

// Input starts a recovery.
type Input struct {
	WebhookID int64 `json:"webhook_id"`
	// RecoveryID is the uuid of the workflow id; it marks the deliveries
	// this recovery reopened, so a retried activity redelivers none twice.
	RecoveryID string    `json:"recovery_id"`
	Since      time.Time `json:"since"`
	Until      time.Time `json:"until"`
	// After and Redelivered carry progress across continue-as-new.
	After       string `json:"after,omitempty"`
	Redelivered int    `json:"redelivered,omitempty"`
}

// ListInput asks for the next page of failed deliveries, oldest first,
// after the delivery id After ("" for the first page).
type ListInput struct {
	WebhookID int64     `json:"webhook_id"`
	Since     time.Time `json:"since"`
	Until     time.Time `json:"until"`
	After     string    `json:"after,omitempty"`
	Limit     int       `json:"limit"`
}

// ListResult is a page of delivery ids.
type ListResult struct {
	DeliveryIDs []string `json:"delivery_ids"`
}

// RedeliverInput asks for one delivery to be sent again.
type RedeliverInput struct {
	DeliveryID string `json:"delivery_id"`
	RecoveryID string `json:"recovery_id"`
}

// RedeliverResult says what happened to it.
type RedeliverResult struct {
	// Redelivered: a new attempt series runs for it, started by this
	// recovery.
	Redelivered bool `json:"redelivered"`
	// WebhookGone: the webhook was disabled or deleted; the recovery stops.
	WebhookGone bool `json:"webhook_gone,omitempty"`
}

// Result ends the workflow.
type Result struct {
	Redelivered int  `json:"redelivered"`
	Stopped     bool `json:"stopped,omitempty"`
}

// StartOptions start one recovery of a webhook: each has an id of its own,
// and a second start of the same id fails.
func StartOptions(orgID, webhookID int64, recoveryID string) client.StartWorkflowOptions {
	owner := searchattr.Owner{OrganizationID: orgID, WebhookID: webhookID}
	return client.StartWorkflowOptions{
		ID: WorkflowID(webhookID, recoveryID), TaskQueue: TaskQueue,
		TypedSearchAttributes: owner.Attributes(), StaticSummary: owner.Summary("recovery " + recoveryID),
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_FAIL,
		WorkflowIDReusePolicy:    enumspb.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE,
	}
}

// Start starts a recovery of a webhook's failed deliveries.
func Start(ctx context.Context, c client.Client, orgID int64, in Input) error {
	_, err := c.ExecuteWorkflow(ctx, StartOptions(orgID, in.WebhookID, in.RecoveryID), WorkflowName, in)
	return err
}
