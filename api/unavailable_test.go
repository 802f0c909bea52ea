package api

import (
	"fmt"
	"testing"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
)

// Temporal's refusals that pass (a rate limit, too many updates of one
// workflow in flight) are 503 for the client to retry, as an unreachable
// server is; before, they were 500.
func TestTemporalResourceExhaustedIsUnavailable(t *testing.T) {
	for _, cause := range []enumspb.ResourceExhaustedCause{
		enumspb.RESOURCE_EXHAUSTED_CAUSE_RPS_LIMIT,
		enumspb.RESOURCE_EXHAUSTED_CAUSE_CONCURRENT_LIMIT,
	} {
		err := fmt.Errorf("update workflow: %w", serviceerror.NewResourceExhausted(cause, "limit reached"))
		if !isUnavailable(err) {
			t.Errorf("%v is not unavailable", err)
		}
	}
	if isUnavailable(serviceerror.NewInvalidArgument("bad")) {
		t.Error("an invalid argument is unavailable")
	}
}
