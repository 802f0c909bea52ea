// Package searchattr names the Temporal search attributes every Mailyard
// workflow carries, so an operator can list one organization's (or domain's,
// or webhook's) workflows in the Temporal UI, e.g.
// `MailyardOrganizationId = 3`. They hold ids only (docs in deploy/README.md).
//
// The attributes must exist on the namespace before a workflow that carries
// them starts: `mailyard temporal setup` registers them on a cluster, and the
// dev server of `mailyard dev` and the tests gets them at start.
package searchattr

import (
	"fmt"
	"strings"

	"go.temporal.io/sdk/temporal"
)

// The attributes, all of type Int.
var (
	OrganizationID = temporal.NewSearchAttributeKeyInt64("MailyardOrganizationId")
	DomainID       = temporal.NewSearchAttributeKeyInt64("MailyardDomainId")
	WebhookID      = temporal.NewSearchAttributeKeyInt64("MailyardWebhookId")
)

// Names lists every attribute's name; all are of type Int.
func Names() []string {
	return []string{OrganizationID.GetName(), DomainID.GetName(), WebhookID.GetName()}
}

// Owner says whose a workflow is. Zero ids do not apply and are left out.
type Owner struct {
	OrganizationID, DomainID, WebhookID int64
}

// Attributes are the search attributes of a workflow of o.
func (o Owner) Attributes() temporal.SearchAttributes {
	return temporal.NewSearchAttributes(o.Updates()...)
}

// Updates sets o's attributes on a running workflow
// (workflow.UpsertTypedSearchAttributes), for a workflow that learns its
// owner as it runs.
func (o Owner) Updates() []temporal.SearchAttributeUpdate {
	var updates []temporal.SearchAttributeUpdate
	for _, a := range []struct {
		key temporal.SearchAttributeKeyInt64
		id  int64
	}{{OrganizationID, o.OrganizationID}, {DomainID, o.DomainID}, {WebhookID, o.WebhookID}} {
		if a.id != 0 {
			updates = append(updates, a.key.ValueSet(a.id))
		}
	}
	return updates
}

// Summary is the static summary the Temporal UI shows for a workflow: what
// it is about, in ids, e.g. "email 0193… · organization 3 · domain 7".
func (o Owner) Summary(what string) string {
	parts := []string{what}
	if o.OrganizationID != 0 {
		parts = append(parts, fmt.Sprintf("organization %d", o.OrganizationID))
	}
	if o.DomainID != 0 {
		parts = append(parts, fmt.Sprintf("domain %d", o.DomainID))
	}
	if o.WebhookID != 0 {
		parts = append(parts, fmt.Sprintf("webhook %d", o.WebhookID))
	}
	return strings.Join(parts, " · ")
}
