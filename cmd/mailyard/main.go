// Command mailyard runs every part of Mailyard: the API, the Temporal workers, the
// DKIM DNS server, migrations, and the embedded development stack.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
)

const usage = `mailyard — management API for an email-sending platform

Usage:
  mailyard api                 run the HTTP API and the internal listener
  mailyard worker              run the Temporal workers
  mailyard dns                 run the authoritative DNS server for the DKIM zone
  mailyard inbound             run the SMTP server at the bounce host (bounces, complaints)
  mailyard submission          run SMTP submission for applications (AUTH with a credential)
  mailyard migrate [up|status] apply or list database migrations
  mailyard org create NAME     create an organization and print its admin key once
  mailyard events emit ...     send one email event to the internal ingest endpoint
  mailyard temporal setup      register the namespace and search attributes on a cluster
  mailyard dev                 everything on the embedded defaults (make run)

Configuration comes from the environment; see README.md.
`

func main() {
	logger := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	slog.SetDefault(logger)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// The first signal begins the graceful stop; once it has, a second one
	// (Ctrl-C again, while a worker waits for an SMTP attempt) ends the
	// process at once, as signals do by default.
	context.AfterFunc(ctx, stop)

	if err := run(ctx, logger, os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "mailyard:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, logger *slog.Logger, args []string) error {
	if len(args) == 0 {
		fmt.Fprint(os.Stderr, usage)
		return fmt.Errorf("missing command")
	}
	switch args[0] {
	case "api":
		return cmdAPI(ctx, logger)
	case "worker":
		return cmdWorker(ctx, logger)
	case "dns":
		return cmdDNS(ctx, logger)
	case "inbound":
		return cmdInbound(ctx, logger)
	case "submission":
		return cmdSubmission(ctx, logger)
	case "migrate":
		return cmdMigrate(ctx, args[1:])
	case "org":
		return cmdOrg(ctx, args[1:])
	case "events":
		return cmdEvents(ctx, args[1:])
	case "temporal":
		return cmdTemporal(ctx, args[1:])
	case "dev":
		return cmdDev(ctx, logger)
	case "help", "-h", "--help":
		fmt.Print(usage)
		return nil
	default:
		fmt.Fprint(os.Stderr, usage)
		return fmt.Errorf("unknown command %q", args[0])
	}
}
