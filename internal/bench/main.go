// Command bench measures Mailyard (`make bench`). Every figure is printed beside a
// baseline measured in the same run on the same machine; nothing is asserted.
//
// -only runs some of the benchmarks: `go run ./internal/bench -only email`;
// -cpuprofile writes where this process spent its CPU, for `go tool pprof`.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime/pprof"
	"slices"
	"strings"
)

func main() {
	benches := []struct {
		name string
		run  func(context.Context) error
	}{
		{"api", benchAPI},
		{"delivery", func(ctx context.Context) error { return benchDelivery(ctx, os.Stdout) }},
		{"email", func(ctx context.Context) error { return benchEmail(ctx, os.Stdout) }},
		{"inbound", func(ctx context.Context) error { return benchInbound(ctx, os.Stdout) }},
		{"tracking", func(ctx context.Context) error { return benchTracking(ctx, os.Stdout) }},
	}
	var names []string
	for _, b := range benches {
		names = append(names, b.name)
	}
	only := flag.String("only", "", "comma-separated benchmarks to run, of "+strings.Join(names, ", ")+" (default: all)")
	cpuProfile := flag.String("cpuprofile", "", "write this process's CPU profile (API, workers, clients) to the file")
	flag.Parse()
	var chosen []string
	if *only != "" {
		chosen = strings.Split(*only, ",")
		for _, name := range chosen {
			if !slices.Contains(names, name) {
				fmt.Fprintf(os.Stderr, "bench: -only: %q is not one of %s\n", name, strings.Join(names, ", "))
				os.Exit(2)
			}
		}
	}

	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "bench: -cpuprofile: %v\n", err)
			os.Exit(2)
		}
		defer pprof.StopCPUProfile()
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	for _, b := range benches {
		if chosen != nil && !slices.Contains(chosen, b.name) {
			continue
		}
		if err := b.run(ctx); err != nil {
			fmt.Fprintf(os.Stderr, "bench %s: %v\n", b.name, err)
			pprof.StopCPUProfile()
			os.Exit(1)
		}
	}
}
