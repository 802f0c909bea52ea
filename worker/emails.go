package worker

import (
	"go.temporal.io/sdk/activity"
	sdkworker "go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/mailyard/mailyard/activities"
	"github.com/mailyard/mailyard/internal/bouncetag"
	"github.com/mailyard/mailyard/internal/dnscheck"
	"github.com/mailyard/mailyard/internal/metrics"
	"github.com/mailyard/mailyard/internal/smtpsend"
	"github.com/mailyard/mailyard/internal/store"
	"github.com/mailyard/mailyard/internal/tracking"
	"github.com/mailyard/mailyard/workflows/email"
	"github.com/mailyard/mailyard/workflows/inbound"
)

// emailStopTimeout waits for an SMTP attempt (up to 15 minutes), so a
// deploy does not cut an SMTP session in half.
const emailStopTimeout = email.AttemptTimeout + stopMargin

// newEmailWorker runs email workflows and their steps.
func newEmailWorker(d Deps, fatal chan<- error) (sdkworker.Worker, error) {
	sender := d.EmailSender
	if sender == nil {
		var err error
		if sender, err = NewSender(d); err != nil {
			return nil, err
		}
	}
	tags, err := bouncetag.New(d.Config.EncryptionKey)
	if err != nil {
		return nil, err
	}
	links, err := tracking.NewLinks(d.Config.EncryptionKey, d.Config.BounceHost)
	if err != nil {
		return nil, err
	}
	emails := &activities.Emails{Store: d.Store, Box: d.Box, Tags: tags, Sender: sender, Runs: d.Events.Runs}
	if d.Config.Tracking.URL != "" {
		emails.Links, emails.TrackingURL = links, d.Config.Tracking.URL
	}
	w := sdkworker.New(d.Client, email.TaskQueue, workerOptions(emailStopTimeout, fatal))
	RegisterEmails(w, emails)
	RegisterInbound(w, &activities.Inbound{Store: d.Store, Runs: d.Events.Runs, Logger: d.Logger, Tags: tags,
		Unsubscribes: &tracking.Recorder{Store: d.Store, Runs: d.Events.Runs}, Tokens: links.Keys})
	metrics.StartInboundKinds(store.InboundKinds())
	return w, nil
}

// NewSender builds the SMTP transport the configuration describes.
func NewSender(d Deps) (*smtpsend.Sender, error) {
	c := d.Config.SMTP
	resolver, err := dnscheck.New(d.Config.DNSResolver, 0)
	if err != nil {
		return nil, err
	}
	return smtpsend.New(smtpsend.Config{
		Mode: c.Mode, Port: c.Port, HELO: c.HELO, TLS: c.TLS, AllowPrivateNetworks: c.AllowPrivateNetworks,
		Relay: c.Relay, RelayImplicitTLS: c.RelayImplicitTLS, RelayUsername: c.RelayUsername, RelayPassword: c.RelayPassword,
		Resolver: resolver,
	})
}

// RegisterEmails registers the email workflow and its activities under the
// names of the contract.
func RegisterEmails(r sdkworker.Registry, a *activities.Emails) {
	r.RegisterWorkflowWithOptions(email.Workflow, workflow.RegisterOptions{Name: email.WorkflowName})
	r.RegisterActivityWithOptions(a.Prepare, activity.RegisterOptions{Name: email.PrepareActivity})
	r.RegisterActivityWithOptions(a.Attempt, activity.RegisterOptions{Name: email.AttemptActivity})
	r.RegisterActivityWithOptions(a.Erase, activity.RegisterOptions{Name: email.EraseActivity})
	r.RegisterActivityWithOptions(a.FirstAttempt, activity.RegisterOptions{Name: email.FirstAttemptActivity})
	r.RegisterActivityWithOptions(a.Reschedule, activity.RegisterOptions{Name: email.RescheduleActivity})
	r.RegisterActivityWithOptions(a.Cancel, activity.RegisterOptions{Name: email.CancelActivity})
}

// RegisterInbound registers the inbound-message workflow and its activities
// under the names of the contract (they run on the email task queue).
func RegisterInbound(r sdkworker.Registry, a *activities.Inbound) {
	r.RegisterWorkflowWithOptions(inbound.Workflow, workflow.RegisterOptions{Name: inbound.WorkflowName})
	r.RegisterActivityWithOptions(a.Handle, activity.RegisterOptions{Name: inbound.HandleActivity})
	r.RegisterActivityWithOptions(a.EraseMessage, activity.RegisterOptions{Name: inbound.EraseActivity})
}
