package worker

import (
	"go.temporal.io/sdk/activity"
	sdkworker "go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/mailyard/mailyard/activities"
	"github.com/mailyard/mailyard/internal/webhook"
	"github.com/mailyard/mailyard/workflows/delivery"
	"github.com/mailyard/mailyard/workflows/recovery"
)

// webhookStopTimeout waits for a delivery attempt (a POST of at most 15 s
// within the attempt's 30 s); the recovery steps are as short.
const webhookStopTimeout = delivery.AttemptTimeout + stopMargin

// newWebhookWorker runs delivery workflows and their attempts.
func newWebhookWorker(d Deps, fatal chan<- error) (sdkworker.Worker, error) {
	client := d.WebhookClient
	if client == nil {
		client = webhook.NewClient(webhook.Policy{
			AllowHTTP:            d.Config.WebhookAllowHTTP,
			AllowPrivateNetworks: d.Config.WebhookAllowPrivateNetworks,
		})
	}
	w := sdkworker.New(d.Client, delivery.TaskQueue, workerOptions(webhookStopTimeout, fatal))
	RegisterRecovery(w, &activities.Recovery{Store: d.Store, Runs: d.Events.Runs})
	RegisterWebhooks(w, &activities.Webhooks{Store: d.Store, Box: d.Box, Client: client, Events: d.Events, DisableAfter: d.Config.WebhookDisableAfter})
	return w, nil
}

// RegisterWebhooks registers the delivery workflow and its activity under the
// names of the contract.
func RegisterWebhooks(r sdkworker.Registry, a *activities.Webhooks) {
	r.RegisterWorkflowWithOptions(delivery.Workflow, workflow.RegisterOptions{Name: delivery.WorkflowName})
	r.RegisterActivityWithOptions(a.Attempt, activity.RegisterOptions{Name: delivery.AttemptActivity})
}

// RegisterRecovery registers the recovery workflow and its activities under
// the names of the contract.
func RegisterRecovery(r sdkworker.Registry, a *activities.Recovery) {
	r.RegisterWorkflowWithOptions(recovery.Workflow, workflow.RegisterOptions{Name: recovery.WorkflowName})
	r.RegisterActivityWithOptions(a.ListFailed, activity.RegisterOptions{Name: recovery.ListFailedActivity})
	r.RegisterActivityWithOptions(a.Redeliver, activity.RegisterOptions{Name: recovery.RedeliverActivity})
}
