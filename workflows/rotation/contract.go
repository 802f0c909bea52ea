// Package rotation is the DKIM rotation workflow of a verified domain,
// "dkim-rotation:<domain_id>". It waits until the next automatic rotation (or a
// rotate request), then: confirms through the customer's CNAME that the standby
// key is visible in DNS, switches signing to it, keeps the old key published for
// the retain time, and finally replaces the old key with a fresh published one,
// so the next rotation again has a long-published standby. Then it continues as
// new for the next cycle.
//
// This file is the contract the API and the worker share. Payloads carry ids,
// selectors and statuses only: keys stay in the database.
package rotation

import (
	"context"
	"strconv"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"

	"github.com/mailyard/mailyard/internal/searchattr"
)

// TaskQueue is the domain worker's queue.
const TaskQueue = "mailyard-domains"

// WorkflowName is the registered workflow type.
const WorkflowName = "DKIMRotation"

// WorkflowID is the business key of a domain's rotation workflow.
func WorkflowID(domainID int64) string {
	return "dkim-rotation:" + strconv.FormatInt(domainID, 10)
}

// RotateUpdate asks for a rotation now. Its validator refuses while one runs
// (ErrInProgress); it answers with Status once the rotation has begun.
const RotateUpdate = "rotate"

// SettingsSignal says the domain's rotation settings changed: the workflow reads
// them again and re-arms its timer.
const SettingsSignal = "settings-changed"

// ProgressQuery returns Progress.
const ProgressQuery = "progress"

// ErrInProgressType is the ApplicationError type of a refused rotate update.
const ErrInProgressType = "RotationInProgress"

// Activity names, registered by the worker.
const (
	LoadPlanActivity       = "LoadDKIMRotationPlan"
	BeginActivity          = "BeginDKIMRotation"
	ConfirmStandbyActivity = "ConfirmDKIMStandby"
	SwitchActivity         = "SwitchDKIMKeys"
	ReplaceActivity        = "ReplaceDKIMKey"
)

// Input starts a domain's rotation workflow. It carries its timings, so a
// changed default never changes a running workflow.
type Input struct {
	DomainID int64
	// Retain is how long the old key stays published after the switch.
	Retain time.Duration
	// RecheckEvery is how often DNS is checked again while the standby key is
	// not visible through the customer's CNAME.
	RecheckEvery time.Duration
}

// Plan is what the workflow needs to know of the domain to wait correctly.
type Plan struct {
	// Active is false for a domain that is deleted or not verified: there is
	// nothing to rotate and the workflow ends.
	Active bool
	// Enabled says whether automatic rotation is on; NextRotationAt is when.
	Enabled        bool
	NextRotationAt time.Time
	// Status is the stored rotation status; a rotation found in progress (a
	// previous run was stopped half-way) is resumed.
	Status string
}

// Status is the answer to a rotate request and the selectors of a step.
type Status struct {
	Status         string `json:"status"`
	ActiveSelector string `json:"active_selector"`
	NextSelector   string `json:"next_selector"`
}

// Rotation statuses (the same words the API shows).
const (
	StatusIdle          = "idle"
	StatusWaitingForDNS = "waiting_for_dns"
	StatusSwitched      = "switched"
	StatusDone          = "done"
)

// Progress is what an operator sees through the progress query.
type Progress struct {
	Status         string
	ActiveSelector string
	NextSelector   string
	// NextRotationAt is when the automatic rotation fires (zero when off).
	NextRotationAt time.Time `json:",omitempty"`
	DNSChecks      int
	// ReplaceAt is when the old key is replaced (while switched).
	ReplaceAt time.Time `json:",omitempty"`
}

// StartOptions are the options of every start of a domain's rotation
// workflow: one run at a time (a start while one runs joins it), and a new
// run may follow a closed one.
func StartOptions(orgID, domainID int64) client.StartWorkflowOptions {
	owner := searchattr.Owner{OrganizationID: orgID, DomainID: domainID}
	return client.StartWorkflowOptions{
		ID:                       WorkflowID(domainID),
		TaskQueue:                TaskQueue,
		TypedSearchAttributes:    owner.Attributes(),
		StaticSummary:            owner.Summary("DKIM rotation of domain " + strconv.FormatInt(domainID, 10)),
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
		WorkflowIDReusePolicy:    enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE,
	}
}

// Start starts the domain's rotation workflow, or joins the one that runs.
func Start(ctx context.Context, c client.Client, orgID int64, in Input) error {
	_, err := c.ExecuteWorkflow(ctx, StartOptions(orgID, in.DomainID), WorkflowName, in)
	return err
}

// RotateNow asks the domain's rotation workflow, started if it is not
// running, to rotate now (the rotate update), and returns once the update
// is accepted.
func RotateNow(ctx context.Context, c client.Client, orgID int64, in Input) (client.WorkflowUpdateHandle, error) {
	return c.UpdateWithStartWorkflow(ctx, client.UpdateWithStartWorkflowOptions{
		StartWorkflowOperation: c.NewWithStartWorkflowOperation(StartOptions(orgID, in.DomainID), WorkflowName, in),
		UpdateOptions: client.UpdateWorkflowOptions{
			WorkflowID:   WorkflowID(in.DomainID),
			UpdateName:   RotateUpdate,
			WaitForStage: client.WorkflowUpdateStageAccepted,
		},
	})
}

// SettingsChanged tells the domain's rotation workflow, started if it is
// not running, to read its settings again.
func SettingsChanged(ctx context.Context, c client.Client, orgID int64, in Input) error {
	_, err := c.SignalWithStartWorkflow(ctx, WorkflowID(in.DomainID), SettingsSignal, nil, StartOptions(orgID, in.DomainID), WorkflowName, in)
	return err
}
