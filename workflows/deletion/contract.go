// Package deletion is the workflow that finishes a domain's deletion,
// "domain-deletion:<domain_id>". The API has already taken the domain away from
// the customer (404, credentials revoked); the workflow announces the deletion,
// keeps both DKIM TXT records published for the retain time so that mail already
// sent still verifies, then removes them from the zone and erases the private
// keys.
//
// This file is the contract the API and the worker share; payloads carry ids only.
package deletion

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
const WorkflowName = "DomainDeletion"

// WorkflowID is the business key of a domain's deletion.
func WorkflowID(domainID int64) string {
	return "domain-deletion:" + strconv.FormatInt(domainID, 10)
}

// ProgressQuery returns Progress.
const ProgressQuery = "progress"

// Activity names, registered by the worker.
const (
	AnnounceActivity  = "AnnounceDomainDeleted"
	UnpublishActivity = "UnpublishDKIMKeys"
	EraseActivity     = "EraseDKIMKeys"
)

// Input starts a deletion. Retain is how long the DKIM records stay published.
type Input struct {
	DomainID int64
	Retain   time.Duration
}

// Stages of Progress.
const (
	StageAnnouncing = "announcing"
	StageRetaining  = "retaining"
	StageRemoving   = "removing"
	StageDone       = "done"
)

// Progress is what an operator sees through the progress query.
type Progress struct {
	Stage       string
	RemoveAt    time.Time `json:",omitempty"`
	Unpublished bool
	Erased      bool
}

// StartOptions: one deletion per domain, ever; a repeated start (a retried
// DELETE) joins the one that exists, running or finished.
func StartOptions(orgID, domainID int64) client.StartWorkflowOptions {
	owner := searchattr.Owner{OrganizationID: orgID, DomainID: domainID}
	return client.StartWorkflowOptions{
		ID:                       WorkflowID(domainID),
		TaskQueue:                TaskQueue,
		TypedSearchAttributes:    owner.Attributes(),
		StaticSummary:            owner.Summary("deletion of domain " + strconv.FormatInt(domainID, 10)),
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
		WorkflowIDReusePolicy:    enumspb.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE,
	}
}

// Start starts a domain's deletion; a second start of a deletion that ran
// is refused with serviceerror.WorkflowExecutionAlreadyStarted.
func Start(ctx context.Context, c client.Client, orgID int64, in Input) error {
	_, err := c.ExecuteWorkflow(ctx, StartOptions(orgID, in.DomainID), WorkflowName, in)
	return err
}
