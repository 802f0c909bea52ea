package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"

	"github.com/mailyard/mailyard/internal/searchattr"
	"github.com/mailyard/mailyard/internal/testenv"
)

// `mailyard temporal setup` on a namespace that does not exist yet: it is
// registered with the search attributes; a second run changes nothing and
// succeeds. Then workflows started with the attributes are listed by
// organization, as an operator does in the Temporal UI.
func TestTemporalSetupIsIdempotent(t *testing.T) {
	addr := testenv.Temporal(t)
	const namespace = "mailyard-setup-test"
	env := []string{"TEMPORAL_ADDRESS=" + addr, "TEMPORAL_NAMESPACE=" + namespace}
	for run := 1; run <= 2; run++ {
		p := testenv.Start(t, env, "temporal", "setup")
		testenv.Eventually(t, 90*time.Second, "setup run to end", p.Exited)
		if code := p.ExitCode(); code != 0 {
			t.Fatalf("run %d exited %d:\n%s", run, code, p.Output())
		}
		if run == 2 && strings.Contains(p.Output(), "added") {
			t.Fatalf("the second run added something:\n%s", p.Output())
		}
	}

	c, err := client.Dial(client.Options{HostPort: addr, Namespace: namespace})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	res, err := c.OperatorService().ListSearchAttributes(ctx, &operatorservice.ListSearchAttributesRequest{Namespace: namespace})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range searchattr.Names() {
		if res.GetCustomAttributes()[name] != enumspb.INDEXED_VALUE_TYPE_INT {
			t.Fatalf("%s: %v", name, res.GetCustomAttributes()[name])
		}
	}

	// Two organizations' workflows (nobody runs them: they stay open).
	for i, org := range []int64{41, 41, 42} {
		owner := searchattr.Owner{OrganizationID: org, DomainID: int64(100 + i)}
		_, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
			ID: fmt.Sprintf("setup-test-%d-%d", org, i), TaskQueue: "nobody-polls",
			TypedSearchAttributes: owner.Attributes(), StaticSummary: owner.Summary("test"),
		}, "Nothing")
		if err != nil {
			t.Fatal(err)
		}
	}
	testenv.Eventually(t, 30*time.Second, "organization 41's workflows listed", func() bool {
		list, err := c.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Namespace: namespace, Query: "MailyardOrganizationId = 41"})
		return err == nil && len(list.Executions) == 2
	})
}
