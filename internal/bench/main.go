// Command bench measures Mailyard (`make bench`). Every figure is printed beside a
// baseline measured in the same run on the same machine; nothing is asserted.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	for _, b := range []struct {
		name string
		run  func(context.Context) error
	}{
		{"api", benchAPI},
		{"delivery", func(ctx context.Context) error { return benchDelivery(ctx, os.Stdout) }},
	} {
		if err := b.run(ctx); err != nil {
			fmt.Fprintf(os.Stderr, "bench %s: %v\n", b.name, err)
			os.Exit(1)
		}
	}
}
