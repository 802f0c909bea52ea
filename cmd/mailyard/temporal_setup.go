package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/mailyard/mailyard/internal/config"
	"github.com/mailyard/mailyard/internal/searchattr"
	"github.com/mailyard/mailyard/internal/temporalclient"
)

// namespaceRetention is how long a new namespace keeps closed workflows'
// histories (an existing namespace keeps its own setting).
const namespaceRetention = 30 * 24 * time.Hour

// cmdTemporal runs `mailyard temporal setup`: it makes TEMPORAL_NAMESPACE and
// Mailyard's search attributes exist on the cluster. Safe to repeat.
func cmdTemporal(ctx context.Context, args []string) error {
	if len(args) != 1 || args[0] != "setup" {
		return errors.New("usage: mailyard temporal setup")
	}
	cfg, err := config.Load(config.Need{})
	if err != nil {
		return err
	}
	// The same connection settings as every process: TLS and API keys work
	// for Temporal Cloud and mTLS clusters too.
	opts, err := temporalclient.Options(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		return err
	}
	c, err := client.DialContext(ctx, opts)
	if err != nil {
		return fmt.Errorf("connect to Temporal at %s: %w", cfg.TemporalAddress, err)
	}
	defer c.Close()
	return setupTemporal(ctx, c, cfg.TemporalNamespace, func(format string, a ...any) { fmt.Fprintf(os.Stdout, format+"\n", a...) })
}

// setupTemporal registers the namespace unless it exists, waits until it
// answers, then adds the search attributes it lacks. An attribute that
// exists with another type is an error: workflows could not be started.
func setupTemporal(ctx context.Context, c client.Client, namespace string, say func(string, ...any)) error {
	_, err := c.WorkflowService().RegisterNamespace(ctx, &workflowservice.RegisterNamespaceRequest{
		Namespace: namespace, WorkflowExecutionRetentionPeriod: durationpb.New(namespaceRetention),
	})
	var exists *serviceerror.NamespaceAlreadyExists
	switch {
	case err == nil:
		say("namespace %s registered", namespace)
	case errors.As(err, &exists):
		say("namespace %s exists", namespace)
	default:
		return fmt.Errorf("register namespace %s: %w", namespace, err)
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
	_, err = c.OperatorService().AddSearchAttributes(ctx, &operatorservice.AddSearchAttributesRequest{
		Namespace: namespace, SearchAttributes: missing,
	})
	var added *serviceerror.AlreadyExists
	if err != nil && !errors.As(err, &added) {
		return fmt.Errorf("add search attributes to %s: %w", namespace, err)
	}
	for name := range missing {
		say("search attribute %s added (Int)", name)
	}
	return nil
}
