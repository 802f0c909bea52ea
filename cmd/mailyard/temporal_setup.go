package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/mailyard/mailyard/internal/config"
	"github.com/mailyard/mailyard/internal/temporalclient"
	"github.com/mailyard/mailyard/internal/temporalsetup"
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
	return temporalsetup.Setup(ctx, c, cfg.TemporalNamespace, namespaceRetention, func(format string, a ...any) { fmt.Fprintf(os.Stdout, format+"\n", a...) })
}
