// Package temporalsetup makes a Temporal namespace ready for Mailyard: the
// namespace exists and has Mailyard's search attributes (internal/searchattr),
// usable by workflow starts. It is the one setup that `mailyard temporal
// setup` runs on a cluster, `mailyard dev` on its dev server, and the tests
// on theirs (deploy/README.md).
package temporalsetup

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/mailyard/mailyard/internal/searchattr"
)

// Setup registers the namespace unless it exists (with retention for its
// closed workflows), waits until it answers, then adds the search attributes
// it lacks and waits until they are usable. An attribute that
// exists with another type is an error: workflows could not be started.
func Setup(ctx context.Context, c client.Client, namespace string, retention time.Duration, say func(string, ...any)) error {
	if say == nil {
		say = func(string, ...any) {}
	}
	if err := ensureNamespace(ctx, c, namespace, retention, say); err != nil {
		return err
	}

	// A namespace registered a moment ago takes a while to reach every
	// frontend; adding attributes before that fails.
	var have map[string]enumspb.IndexedValueType
	deadline := time.Now().Add(time.Minute)
	for {
		res, err := c.OperatorService().ListSearchAttributes(ctx, &operatorservice.ListSearchAttributesRequest{Namespace: namespace})
		if err == nil {
			have = res.GetCustomAttributes()
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("list search attributes of %s: %w", namespace, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}

	missing := map[string]enumspb.IndexedValueType{}
	for _, name := range searchattr.Names() {
		t, ok := have[name]
		switch {
		case !ok:
			missing[name] = enumspb.INDEXED_VALUE_TYPE_INT
		case t != enumspb.INDEXED_VALUE_TYPE_INT:
			return fmt.Errorf("search attribute %s exists with type %s, Mailyard needs Int", name, t)
		default:
			say("search attribute %s exists", name)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	_, err := c.OperatorService().AddSearchAttributes(ctx, &operatorservice.AddSearchAttributesRequest{
		Namespace: namespace, SearchAttributes: missing,
	})
	var added *serviceerror.AlreadyExists
	if err != nil && !errors.As(err, &added) {
		return fmt.Errorf("add search attributes to %s: %w", namespace, err)
	}
	for name := range missing {
		say("search attribute %s added (Int)", name)
	}
	return waitAttributesUsable(ctx, c, namespace)
}

// ensureNamespace registers the namespace unless it exists. It asks first:
// the deploy files run setup at every start of a pod, and Temporal Cloud, where
// namespaces are created in its console, refuses registration outright.
func ensureNamespace(ctx context.Context, c client.Client, namespace string, retention time.Duration, say func(string, ...any)) error {
	_, err := c.WorkflowService().DescribeNamespace(ctx, &workflowservice.DescribeNamespaceRequest{Namespace: namespace})
	var notFound *serviceerror.NamespaceNotFound
	if err == nil {
		say("namespace %s exists", namespace)
		return nil
	}
	if !errors.As(err, &notFound) {
		return fmt.Errorf("describe namespace %s: %w", namespace, err)
	}
	_, err = c.WorkflowService().RegisterNamespace(ctx, &workflowservice.RegisterNamespaceRequest{
		Namespace: namespace, WorkflowExecutionRetentionPeriod: durationpb.New(retention),
	})
	var exists *serviceerror.NamespaceAlreadyExists
	switch {
	case err == nil:
		say("namespace %s registered", namespace)
	case errors.As(err, &exists): // registered by another pod a moment ago
		say("namespace %s exists", namespace)
	default:
		return fmt.Errorf("register namespace %s: %w", namespace, err)
	}
	return nil
}

// waitAttributesUsable waits until a query on every attribute is accepted. On
// a real cluster, added attributes reach the frontend's namespace cache a few
// seconds after AddSearchAttributes returns, and until then a workflow start
// that carries them is refused ("no mapping defined for search attribute"):
// processes started right after setup would fail their first starts.
func waitAttributesUsable(ctx context.Context, c client.Client, namespace string) error {
	var terms []string
	for _, name := range searchattr.Names() {
		terms = append(terms, name+" = 0")
	}
	query := strings.Join(terms, " AND ")
	deadline := time.Now().Add(time.Minute)
	for {
		_, err := c.CountWorkflow(ctx, &workflowservice.CountWorkflowExecutionsRequest{Namespace: namespace, Query: query})
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the search attributes of %s are not usable a minute after they were added: %w", namespace, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}
