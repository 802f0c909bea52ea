package worker

import (
	"context"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	sdkworker "go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/mailyard/mailyard/activities"
	"github.com/mailyard/mailyard/internal/dnspublish"
	"github.com/mailyard/mailyard/internal/verification"
	"github.com/mailyard/mailyard/workflows/deletion"
	"github.com/mailyard/mailyard/workflows/onboarding"
	"github.com/mailyard/mailyard/workflows/rotation"
)

// NewPublisher builds the configured DKIM publisher.
func NewPublisher(d Deps) (dnspublish.Publisher, error) {
	if d.Config.DNSPublisher == "rfc2136" {
		return dnspublish.NewRFC2136(d.Config.RFC2136.Server, d.Config.RFC2136.TSIG, d.Config.DKIMHost)
	}
	return dnspublish.NewEmbedded(d.Store), nil
}

// domainStopTimeout waits for the longest step of the domain workflows
// (onboarding, rotation, deletion), bounded to one minute each.
const domainStopTimeout = time.Minute + stopMargin

func newDomainWorker(d Deps, fatal chan<- error) (sdkworker.Worker, error) {
	publisher, err := NewPublisher(d)
	if err != nil {
		return nil, err
	}
	verifier, err := verification.New(d.Store, d.Config.DNSResolver, d.Config.SPFHost, d.Config.BounceHost)
	if err != nil {
		return nil, err
	}
	w := sdkworker.New(d.Client, onboarding.TaskQueue, workerOptions(domainStopTimeout, fatal))
	RegisterDomains(w, &activities.Domains{
		Store: d.Store, Box: d.Box, Publisher: publisher, Verifier: verifier, DKIMHost: d.Config.DKIMHost, Events: d.Events,
		Rotations: RotationStarter{Client: d.Client, Retain: d.Config.DKIMRetain, RecheckEvery: d.Config.DKIMRecheck},
	})
	return w, nil
}

// RotationStarter starts rotation workflows with the configured timings.
type RotationStarter struct {
	Client       client.Client
	Retain       time.Duration
	RecheckEvery time.Duration
}

// StartRotation starts (or joins) the domain's rotation workflow.
func (r RotationStarter) StartRotation(ctx context.Context, orgID, domainID int64) error {
	return rotation.Start(ctx, r.Client, orgID, rotation.Input{DomainID: domainID, Retain: r.Retain, RecheckEvery: r.RecheckEvery})
}

// RegisterDomains registers the domain workflows (onboarding, rotation,
// deletion) and their activities under the names of their contracts.
func RegisterDomains(r sdkworker.Registry, a *activities.Domains) {
	r.RegisterWorkflowWithOptions(onboarding.Workflow, workflow.RegisterOptions{Name: onboarding.WorkflowName})
	r.RegisterWorkflowWithOptions(rotation.Workflow, workflow.RegisterOptions{Name: rotation.WorkflowName})
	r.RegisterWorkflowWithOptions(deletion.Workflow, workflow.RegisterOptions{Name: deletion.WorkflowName})
	for name, fn := range map[string]any{
		onboarding.VerifiedActivity:     a.DomainVerified,
		rotation.LoadPlanActivity:       a.LoadDKIMRotationPlan,
		rotation.BeginActivity:          a.BeginDKIMRotation,
		rotation.ConfirmStandbyActivity: a.ConfirmDKIMStandby,
		rotation.SwitchActivity:         a.SwitchDKIMKeys,
		rotation.ReplaceActivity:        a.ReplaceDKIMKey,
		deletion.AnnounceActivity:       a.AnnounceDomainDeleted,
		deletion.UnpublishActivity:      a.UnpublishDKIMKeys,
		deletion.EraseActivity:          a.EraseDKIMKeys,
	} {
		r.RegisterActivityWithOptions(fn, activity.RegisterOptions{Name: name})
	}
	r.RegisterActivityWithOptions(a.GenerateDKIMKeys, activity.RegisterOptions{Name: onboarding.GenerateKeysActivity})
	r.RegisterActivityWithOptions(a.PublishDKIMKeys, activity.RegisterOptions{Name: onboarding.PublishKeysActivity})
	r.RegisterActivityWithOptions(a.CheckDNSRecords, activity.RegisterOptions{Name: onboarding.CheckRecordsActivity})
	r.RegisterActivityWithOptions(a.FailDomain, activity.RegisterOptions{Name: onboarding.FailDomainActivity})
}
