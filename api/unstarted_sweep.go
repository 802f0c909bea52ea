package api

import (
	"context"
	"errors"
	"time"

	"github.com/mailyard/mailyard/internal/periodic"
	"github.com/mailyard/mailyard/internal/store"
	"github.com/mailyard/mailyard/internal/temporalclient"
	"github.com/mailyard/mailyard/workflows/email"
	"github.com/mailyard/mailyard/workflows/onboarding"
)

const (
	// unstartedAge is how old an email no workflow has accepted, or a
	// pending domain, must be before a sweep asks Temporal about it: far
	// longer than a request takes from storing it to starting its workflow
	// (startEmailTimeout).
	unstartedAge = 2 * time.Minute

	// startEmailTimeout bounds the start of an email's workflow: a request
	// that cannot start it in that time removes the email and answers 503.
	// A batch's starts share it (Deps.StartTimeout overrides it).
	startEmailTimeout = 30 * time.Second

	// unstartedSweepEvery is how often the sweeps run, and unstartedBatch
	// how many emails or domains one pass looks at.
	unstartedSweepEvery = time.Minute
	unstartedBatch      = 100

	// unstartedDomainHorizon bounds the domains the onboarding sweep asks
	// Temporal about, so that it does not describe every pending domain's
	// run each minute. A domain older than that without a run is still
	// onboarded again by Verify domain (onboardingRuns.Verify).
	unstartedDomainHorizon = time.Hour
	// unstartedDomainPages bounds the batches of domains one pass of the
	// onboarding sweep walks: 1,000 domains created within the horizon.
	unstartedDomainPages = 10
)

// SweepUnstartedEmails finishes what an API process left undone when it died
// (SIGKILL, power loss) between storing an email and starting its workflow,
// which would otherwise leave the email queued for ever:
//   - an email whose answer committed with it (a request with an
//     Idempotency-Key: the client gets that answer when it retries) has its
//     workflow started;
//   - any other email is removed once it has been found so for unstartedAge
//     of the database's clock: the client got no answer, nothing was sent
//     or counted, and its retry is the email that is sent.
//
// An email whose workflow exists, running or not, is left alone, and marked
// so that later passes no longer ask about it: a scheduled email stays
// unaccepted until its time, and would otherwise be asked about every pass,
// and fill the batch. Canceled emails are never looked at (their workflow
// ended; once Temporal's retention removes it, starting or removing the
// email would be wrong). It returns how many emails it started and removed.
func (s *Server) SweepUnstartedEmails(ctx context.Context) (started, removed int, err error) {
	emails, err := s.store.UnacceptedEmailsBefore(ctx, time.Now().Add(-unstartedAge), unstartedBatch)
	if err != nil {
		return 0, 0, err
	}
	// The emails whose workflow exists, marked once at the end of the pass
	// (or when it stops early): one write for the batch.
	var seen []string
	defer func() {
		if len(seen) == 0 {
			return
		}
		if merr := s.store.MarkEmailWorkflowsSeen(ctx, seen); merr != nil {
			err = errors.Join(err, merr) // asked about again next pass
		}
	}()
	for i := range emails {
		e := &emails[i]
		exists, _, err := temporalclient.RunOf(ctx, s.temporal, email.WorkflowID(e.ID))
		if err != nil {
			return started, removed, err // Temporal unreachable: try again next pass
		}
		if exists {
			seen = append(seen, e.ID)
			continue // started; waiting for a worker or its time
		}
		if e.Answered {
			if err := s.startEmail(ctx, e); err != nil {
				return started, removed, err
			}
			s.logger.InfoContext(ctx, "started the workflow of an answered email whose API process died first", "email_id", e.ID)
			seen = append(seen, e.ID)
			started++
			continue
		}
		// Removed once the database's clock says it has been unstarted
		// for unstartedAge since a pass first found it so: created_at is
		// the clock of the host that stored it.
		deleted, err := s.store.DeleteEmailUnstartedFor(ctx, e.ID, unstartedAge)
		switch {
		case errors.Is(err, store.ErrNotFound):
			continue // removed meanwhile (another API process's sweep)
		case err != nil:
			return started, removed, err
		case !deleted:
			continue // first found now, or accepted meanwhile (its workflow did start)
		}
		s.logger.InfoContext(ctx, "removed an unanswered email whose workflow never started", "email_id", e.ID)
		removed++
	}
	return started, removed, nil
}

// SweepUnstartedOnboarding starts the onboarding of pending domains whose
// verification window opened in the last unstartedDomainHorizon (and at
// least unstartedAge ago) that have no open onboarding run: their API process
// died between storing the domain and starting the run, or a failed domain
// was reopened by Verify domain and Temporal could not be reached. Unlike an
// email, such a domain is never removed: the client's retry finds it (its
// answer committed with it, or 409 domain_exists), and onboarding it is all
// that was left to do. It returns how many it started.
//
// It walks every such domain, a batch at a time, up to
// unstartedDomainPages batches a pass: most have their run open (a domain
// is pending for up to its window), and with only one batch a pass, more
// than a batch of them kept the sweep from ever reaching a later domain
// whose run never started.
func (s *Server) SweepUnstartedOnboarding(ctx context.Context) (int, error) {
	now := time.Now()
	started := 0
	var after int64
	for range unstartedDomainPages {
		domains, err := s.store.PendingDomainsWindowBetween(ctx, now.Add(-unstartedDomainHorizon), now.Add(-unstartedAge), after, unstartedBatch)
		if err != nil {
			return started, err
		}
		for i := range domains {
			d := &domains[i]
			after = d.ID
			_, open, err := temporalclient.RunOf(ctx, s.temporal, onboarding.WorkflowID(d.ID))
			if err != nil {
				return started, err
			}
			if open {
				continue
			}
			if err := s.onboarding.Start(ctx, d); err != nil {
				return started, err
			}
			s.logger.InfoContext(ctx, "started the onboarding of a domain whose API process died first", "domain_id", d.ID)
			started++
		}
		if len(domains) < unstartedBatch {
			break
		}
	}
	return started, nil
}

// SweepUnfinishedDeletions finishes the DELETEs of domains that Temporal
// could not be told of (the client got 503, and the domain was already gone
// for it): their rotation and onboarding are stopped and their deletion
// workflow started, which unpublishes their keys and erases them. It
// returns how many it finished.
func (s *Server) SweepUnfinishedDeletions(ctx context.Context) (int, error) {
	domains, err := s.store.DeletingDomainsBefore(ctx, time.Now().Add(-unstartedAge), unstartedBatch)
	if err != nil {
		return 0, err
	}
	for i, d := range domains {
		if err := s.lifecycle.Delete(ctx, d.OrganizationID, d.ID); err != nil {
			return i, err
		}
		if err := s.store.ConfirmDomainDeleted(ctx, d.ID); err != nil {
			return i, err
		}
		s.logger.InfoContext(ctx, "finished the deletion of a domain whose DELETE could not reach Temporal", "domain_id", d.ID)
	}
	return len(domains), nil
}

// sweepUnstarted runs the sweeps every unstartedSweepEvery until ctx ends.
// Every API process sweeps; what they do is idempotent.
func (s *Server) sweepUnstarted(ctx context.Context) {
	periodic.Every(ctx, unstartedSweepEvery, unstartedSweepEvery, func(ctx context.Context) {
		if _, _, err := s.SweepUnstartedEmails(ctx); err != nil && ctx.Err() == nil {
			s.logger.WarnContext(ctx, "sweeping unstarted emails", "error", err)
		}
		if _, err := s.SweepUnstartedOnboarding(ctx); err != nil && ctx.Err() == nil {
			s.logger.WarnContext(ctx, "sweeping unstarted onboarding", "error", err)
		}
		if _, err := s.SweepUnfinishedDeletions(ctx); err != nil && ctx.Err() == nil {
			s.logger.WarnContext(ctx, "sweeping unfinished domain deletions", "error", err)
		}
	})
}
