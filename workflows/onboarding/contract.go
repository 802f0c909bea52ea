// Package onboarding is the domain onboarding workflow: generate and publish the
// DKIM keys of a new sending domain, then check the customer's DNS on a schedule
// until the four records are in place (verified) or the window closes (failed).
//
// This file is the contract the API and the worker share: names, ids and the
// small payloads that cross Temporal. Payloads carry ids and statuses only — never
// a key, a secret or customer data — because operators read them in the UI.
package onboarding

import (
	"context"
	"strconv"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"

	"github.com/mailyard/mailyard/internal/searchattr"
)

// TaskQueue is where the domain worker polls.
const TaskQueue = "mailyard-domains"

// WorkflowName is the registered workflow type.
const WorkflowName = "DomainOnboarding"

// WorkflowID is the business key of a domain's onboarding run.
func WorkflowID(domainID int64) string {
	return "domain-onboarding:" + strconv.FormatInt(domainID, 10)
}

// VerifyUpdate asks a running onboarding to check the records now and answer with
// the domain's status.
const VerifyUpdate = "verify"

// ProgressQuery returns Progress.
const ProgressQuery = "progress"

// Activity names, registered by the worker.
const (
	GenerateKeysActivity = "GenerateDKIMKeys"
	PublishKeysActivity  = "PublishDKIMKeys"
	CheckRecordsActivity = "CheckDNSRecords"
	FailDomainActivity   = "FailDomain"
	// VerifiedActivity announces a verified domain (the domain.verified event)
	// and starts its DKIM rotation workflow.
	VerifiedActivity = "DomainVerified"
)

// VerifiedEffectsChange is the workflow.GetVersion change id of the step that
// runs VerifiedActivity: runs recorded before it skip the step on replay.
const VerifiedEffectsChange = "verified-effects"

// Step says: check every Every while the window is younger than Until.
type Step struct {
	Every time.Duration
	Until time.Duration
}

// DefaultSchedule is the README's verification schedule: every minute for 10 minutes, every 5 minutes
// until 1 hour, every 30 minutes until 72 hours; then the domain fails.
var DefaultSchedule = []Step{
	{Every: time.Minute, Until: 10 * time.Minute},
	{Every: 5 * time.Minute, Until: time.Hour},
	{Every: 30 * time.Minute, Until: 72 * time.Hour},
}

// Input starts (or continues) an onboarding run.
type Input struct {
	DomainID int64
	// Schedule overrides DefaultSchedule (operators, tests).
	Schedule []Step `json:",omitempty"`
	// WindowStart is when the verification window opened; zero means now. It
	// survives continue-as-new so the 72 hours are counted once.
	WindowStart time.Time `json:",omitempty"`
	// KeysPublished skips key generation and publishing (a new window for a failed
	// domain, or a continued run).
	KeysPublished bool `json:",omitempty"`
}

// Result is the domain's final status: verified or failed.
type Result struct {
	Status string
}

// CheckResult is what one round of checks reports to the workflow.
type CheckResult struct {
	Status       string // the domain's status after the round
	Verified     int
	LookupFailed int
	Total        int
}

// VerifyResult answers the verify update.
type VerifyResult struct {
	Status string
}

// Progress is what an operator sees through the progress query.
type Progress struct {
	Stage       string // generating-keys, publishing-keys, checking, done
	Status      string // pending, verified, failed
	Checks      int
	LastCheck   CheckResult
	NextCheckAt time.Time `json:",omitempty"`
	WindowStart time.Time
}

// Stages of Progress.
const (
	StageGeneratingKeys = "generating-keys"
	StagePublishingKeys = "publishing-keys"
	StageChecking       = "checking"
	StageDone           = "done"
)

// Domain statuses as the workflow sees them.
const (
	StatusPending  = "pending"
	StatusVerified = "verified"
	StatusFailed   = "failed"
)

// NextWait returns how long to wait after a check made `elapsed` into the window,
// and false when the window is over. The last wait is shortened so the final check
// falls exactly at the window's end.
func NextWait(schedule []Step, elapsed time.Duration) (time.Duration, bool) {
	if len(schedule) == 0 {
		schedule = DefaultSchedule
	}
	end := schedule[len(schedule)-1].Until
	if elapsed >= end {
		return 0, false
	}
	for _, s := range schedule {
		if elapsed < s.Until {
			return min(s.Every, end-elapsed), true
		}
	}
	return 0, false
}

// StartOptions start a domain's onboarding: one run at a time per domain,
// and a new run may follow a closed one (a new verification window).
func StartOptions(orgID, domainID int64) client.StartWorkflowOptions {
	owner := searchattr.Owner{OrganizationID: orgID, DomainID: domainID}
	return client.StartWorkflowOptions{
		ID:                       WorkflowID(domainID),
		TaskQueue:                TaskQueue,
		TypedSearchAttributes:    owner.Attributes(),
		StaticSummary:            owner.Summary("onboarding of domain " + strconv.FormatInt(domainID, 10)),
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
		WorkflowIDReusePolicy:    enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE,
	}
}

// Start starts a domain's onboarding, or joins the run that is open.
func Start(ctx context.Context, c client.Client, orgID int64, in Input) error {
	_, err := c.ExecuteWorkflow(ctx, StartOptions(orgID, in.DomainID), WorkflowName, in)
	return err
}

// VerifyNow asks the domain's onboarding, started if no run is open, to
// check the records now (the verify update), and returns once the run has
// accepted the request; the handle's Get waits for the check.
func VerifyNow(ctx context.Context, c client.Client, orgID int64, in Input) (client.WorkflowUpdateHandle, error) {
	return c.UpdateWithStartWorkflow(ctx, client.UpdateWithStartWorkflowOptions{
		StartWorkflowOperation: c.NewWithStartWorkflowOperation(StartOptions(orgID, in.DomainID), WorkflowName, in),
		UpdateOptions: client.UpdateWorkflowOptions{
			WorkflowID:   WorkflowID(in.DomainID),
			UpdateName:   VerifyUpdate,
			WaitForStage: client.WorkflowUpdateStageAccepted,
		},
	})
}
