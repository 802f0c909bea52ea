package store

import (
	"context"

	"github.com/uptrace/bun"
)

type commitHookKey struct{}

// WithCommitHook returns a context whose creation (CreateWebhook, CreateEmail, CreateDomain) runs f
// inside its own transaction, after its writes: what f writes commits with the
// creation or not at all, and an error from f rolls the creation back. The API
// stores an idempotent answer this way (docs/api-conventions.md), so that a
// process killed after the commit still leaves the answer for the retry.
func WithCommitHook(ctx context.Context, f func(ctx context.Context, tx bun.Tx) error) context.Context {
	return context.WithValue(ctx, commitHookKey{}, f)
}

// hasCommitHook tells whether ctx carries a commit hook.
func hasCommitHook(ctx context.Context) bool {
	f, ok := ctx.Value(commitHookKey{}).(func(context.Context, bun.Tx) error)
	return ok && f != nil
}

// runCommitHook runs the hook of ctx, if any, in tx.
func runCommitHook(ctx context.Context, tx bun.Tx) error {
	if f, ok := ctx.Value(commitHookKey{}).(func(context.Context, bun.Tx) error); ok && f != nil {
		return f(ctx, tx)
	}
	return nil
}
