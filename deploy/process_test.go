package deploy

import (
	"encoding/base64"
	"fmt"
	"net"
	"slices"
	"strings"

	"github.com/mailyard/mailyard/internal/config"
)

// needOf is what each process of the deploy files requires, by its subcommand.
var needOf = map[string]config.Need{
	"api":        config.NeedAPI,
	"worker":     config.NeedWorker,
	"dns":        config.NeedDNS,
	"inbound":    config.NeedInbound,
	"submission": config.NeedSubmission,
	"migrate":    config.NeedMigrate,
	// `mailyard temporal setup` only talks to Temporal.
	"temporal": {},
}

// startsWorkflows are the processes that start workflows, which the Temporal
// server refuses until `mailyard temporal setup` has registered the namespace
// and the search attributes: the deploy files run setup before them.
var startsWorkflows = []string{"api", "worker", "inbound", "submission"}

// secretSamples stand in for values that live in a Secret or .env, shaped so the
// configuration accepts them: the checks prove names and shapes, never real secrets.
var secretSamples = map[string]string{
	"MAILYARD_DATABASE_URL":   "postgres://mailyard:sample@postgres:5432/mailyard",
	"MAILYARD_ENCRYPTION_KEY": base64.StdEncoding.EncodeToString(make([]byte, 32)),
	"MAILYARD_INTERNAL_TOKEN": "sample-token",
	"MAILYARD_RFC2136_TSIG":   "update.:hmac-sha256:c2FtcGxl",
}

// checkProcess checks the environment one deployed process gets: every MAILYARD_*
// and TEMPORAL_* name is one the binary reads, each setting the process requires is
// there, and the configuration loads. It returns the loaded configuration (nil on
// failure) and the problems, each prefixed with where.
func checkProcess(where string, args []string, env map[string]string) (*config.Config, []error) {
	if len(args) == 0 {
		return nil, []error{fmt.Errorf("%s: no subcommand (api, worker, dns, inbound, submission, migrate up or temporal setup)", where)}
	}
	need, ok := needOf[args[0]]
	if !ok {
		return nil, []error{fmt.Errorf("%s: %q is not a process of the mailyard binary (api, worker, dns, inbound, submission, migrate, temporal)", where, args[0])}
	}
	if args[0] == "migrate" && !slices.Equal(args, []string{"migrate", "up"}) {
		return nil, []error{fmt.Errorf("%s: the migration step runs %q, want migrate up", where, args)}
	}
	if args[0] == "temporal" && !slices.Equal(args, []string{"temporal", "setup"}) {
		return nil, []error{fmt.Errorf("%s: the Temporal step runs %q, want temporal setup", where, args)}
	}
	var errs []error
	known := config.Variables()
	for name := range env {
		if (strings.HasPrefix(name, "MAILYARD_") || strings.HasPrefix(name, "TEMPORAL_")) && !slices.Contains(known, name) {
			errs = append(errs, fmt.Errorf("%s: %s is not a variable mailyard reads", where, name))
		}
	}
	for _, name := range need.Required() {
		if env[name] == "" {
			errs = append(errs, fmt.Errorf("%s: %s is required by mailyard %s but not set", where, name, args[0]))
		}
	}
	if len(errs) > 0 {
		return nil, errs
	}
	cfg, err := config.LoadFrom(func(name string) string { return env[name] }, need)
	if err != nil {
		for _, line := range strings.Split(err.Error(), "\n") {
			errs = append(errs, fmt.Errorf("%s: %s", where, line))
		}
		return nil, errs
	}
	return cfg, nil
}

// port returns the port of a host:port address.
func port(addr string) string {
	_, p, _ := net.SplitHostPort(addr)
	return p
}
