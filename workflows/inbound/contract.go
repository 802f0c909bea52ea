// Package inbound is the workflow of one message received at the bounce
// host: "inbound-message:<inbound_id>" handles the message once (classifies
// it and applies its effects: bounces, complaints, suppressions, events)
// and ends; the worker's retention sweep erases its bytes later
// (docs/inbound.md).
//
// This file is the contract shared by the inbound listener and its sweep
// (which start the workflow, through Start only) and the worker (which runs
// it). Only ids, kinds and counts cross Temporal: the message, its addresses
// and its subject stay in the database.
package inbound

import (
	"context"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"

	"github.com/mailyard/mailyard/internal/searchattr"
)

// TaskQueue is where inbound workflows run: the email workers run them
// beside the emails whose fate they report.
const TaskQueue = "mailyard-emails"

// Registered type names; they are part of the recorded histories and never
// change.
const (
	WorkflowName     = "InboundMessage"
	HandleActivity   = "HandleInboundMessage"
	EraseActivity    = "EraseInboundMessage"
	WorkflowIDPrefix = "inbound-message:"
)

// WorkflowID is the business key of an inbound message's workflow.
func WorkflowID(inboundID string) string { return WorkflowIDPrefix + inboundID }

// Input starts the workflow. Retention is the MAILYARD_EMAIL_RETENTION in
// force when the message arrived; only runs started before
// close-when-handled read it (and a worker of that code, during a rolling
// deploy).
type Input struct {
	InboundID string        `json:"inbound_id"`
	Retention time.Duration `json:"retention"`
	// Version is the version of the workflow the run takes, written by
	// Start (CurrentVersion), in place of the close-when-handled version
	// marker runs record otherwise. 0 (runs started before it was
	// written): the run reads its version from that marker.
	Version int `json:"version,omitempty"`
}

// CurrentVersion is the version Start writes into a new run's Input: the
// version of close-when-handled whose runs end once the message is handled.
const CurrentVersion = 1

// HandleInput asks to classify the message and apply its effects.
type HandleInput struct {
	InboundID string `json:"inbound_id"`
}

// HandleResult says what the message was and whose email it concerned, so
// the workflow can carry the owner's search attributes.
type HandleResult struct {
	Kind           string `json:"kind"`
	OrganizationID int64  `json:"organization_id,omitempty"`
	DomainID       int64  `json:"domain_id,omitempty"`
	// Effects counts the recipients whose status the message changed.
	Effects int `json:"effects"`
}

// EraseInput asks to erase the message's bytes.
type EraseInput struct {
	InboundID string `json:"inbound_id"`
}

// Result ends the workflow.
type Result struct {
	Kind    string `json:"kind"`
	Effects int    `json:"effects"`
}

// Start starts the workflow of a stored message. owner holds the ids of the
// email whose envelope sender received it, when known; the workflow adds
// them once it has read a report sent to the bounce host itself. A second
// start of a message (by the sweep) joins its run while it is open; once the
// run has ended, the message is handled and the sweep no longer lists it.
func Start(ctx context.Context, tc client.Client, inboundID string, owner searchattr.Owner, retention time.Duration) error {
	opts := client.StartWorkflowOptions{
		ID: WorkflowID(inboundID), TaskQueue: TaskQueue,
		TypedSearchAttributes: owner.Attributes(), StaticSummary: owner.Summary("inbound message " + inboundID),
		WorkflowIDReusePolicy:    enumspb.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE,
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
	}
	_, err := tc.ExecuteWorkflow(ctx, opts, WorkflowName, Input{InboundID: inboundID, Retention: retention, Version: CurrentVersion})
	return err
}
