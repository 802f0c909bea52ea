package worker

import (
	"go.temporal.io/sdk/activity"
	sdkworker "go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/mailyard/mailyard/activities"
	"github.com/mailyard/mailyard/internal/dnspublish"
	"github.com/mailyard/mailyard/internal/verification"
	"github.com/mailyard/mailyard/workflows/onboarding"
)

// NewPublisher builds the configured DKIM publisher.
func NewPublisher(d Deps) (dnspublish.Publisher, error) {
	if d.Config.DNSPublisher == "rfc2136" {
		return dnspublish.NewRFC2136(d.Config.RFC2136.Server, d.Config.RFC2136.TSIG, d.Config.DKIMHost)
	}
	return dnspublish.NewEmbedded(d.Store), nil
}

func newDomainWorker(d Deps) (sdkworker.Worker, error) {
	publisher, err := NewPublisher(d)
	if err != nil {
		return nil, err
	}
	verifier, err := verification.New(d.Store, d.Config.DNSResolver, d.Config.SPFHost, d.Config.BounceHost)
	if err != nil {
		return nil, err
	}
	w := sdkworker.New(d.Client, onboarding.TaskQueue, sdkworker.Options{})
	RegisterDomains(w, &activities.Domains{Store: d.Store, Box: d.Box, Publisher: publisher, Verifier: verifier, DKIMHost: d.Config.DKIMHost, Events: d.Events})
	return w, nil
}

// RegisterDomains registers the onboarding workflow and its activities under the
// names of the contract.
func RegisterDomains(r sdkworker.Registry, a *activities.Domains) {
	r.RegisterWorkflowWithOptions(onboarding.Workflow, workflow.RegisterOptions{Name: onboarding.WorkflowName})
	r.RegisterActivityWithOptions(a.GenerateDKIMKeys, activity.RegisterOptions{Name: onboarding.GenerateKeysActivity})
	r.RegisterActivityWithOptions(a.PublishDKIMKeys, activity.RegisterOptions{Name: onboarding.PublishKeysActivity})
	r.RegisterActivityWithOptions(a.CheckDNSRecords, activity.RegisterOptions{Name: onboarding.CheckRecordsActivity})
	r.RegisterActivityWithOptions(a.FailDomain, activity.RegisterOptions{Name: onboarding.FailDomainActivity})
}
