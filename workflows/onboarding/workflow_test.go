package onboarding

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/suite"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/mailyard/mailyard/internal/config"
)

type workflowSuite struct {
	suite.Suite
	testsuite.WorkflowTestSuite
	env *testsuite.TestWorkflowEnvironment
}

func TestWorkflow(t *testing.T) { suite.Run(t, new(workflowSuite)) }

// The activities' signatures, registered under the contract's names; each test
// decides what they answer with OnActivity.
func (s *workflowSuite) SetupTest() {
	s.env = s.NewTestWorkflowEnvironment()
	s.env.RegisterWorkflowWithOptions(Workflow, workflow.RegisterOptions{Name: WorkflowName})
	s.env.RegisterActivityWithOptions(func(context.Context, int64) error { return nil }, activity.RegisterOptions{Name: GenerateKeysActivity})
	s.env.RegisterActivityWithOptions(func(context.Context, int64) error { return nil }, activity.RegisterOptions{Name: PublishKeysActivity})
	s.env.RegisterActivityWithOptions(func(context.Context, int64) (CheckResult, error) { return CheckResult{}, nil }, activity.RegisterOptions{Name: CheckRecordsActivity})
	s.env.RegisterActivityWithOptions(func(context.Context, int64, time.Time) (string, error) { return "", nil }, activity.RegisterOptions{Name: FailDomainActivity})
	s.env.RegisterActivityWithOptions(func(context.Context, int64) error { return nil }, activity.RegisterOptions{Name: VerifiedActivity})
}

func (s *workflowSuite) AfterTest(_, _ string) { s.env.AssertExpectations(s.T()) }

// checksAnswer makes the check activity answer pending until call number
// verifiedAt (1-based; 0 = never), recording when each check ran. Two
// checks may run at once (the main loop's and a verify's), each in an
// activity goroutine of its own.
func (s *workflowSuite) checksAnswer(verifiedAt int, at *[]time.Duration, start time.Time) {
	var mu sync.Mutex
	calls := 0
	s.env.OnActivity(CheckRecordsActivity, mock.Anything, int64(7)).Return(
		func(context.Context, int64) (CheckResult, error) {
			mu.Lock()
			defer mu.Unlock()
			calls++
			*at = append(*at, s.env.Now().Sub(start))
			if verifiedAt > 0 && calls >= verifiedAt {
				return CheckResult{Status: StatusVerified, Verified: 4, Total: 4}, nil
			}
			return CheckResult{Status: StatusPending, Verified: 1, Total: 4}, nil
		})
}

func (s *workflowSuite) result() Result {
	s.True(s.env.IsWorkflowCompleted())
	s.NoError(s.env.GetWorkflowError())
	var r Result
	s.NoError(s.env.GetWorkflowResult(&r))
	return r
}

func (s *workflowSuite) TestVerifiedOnTwelfthCheck() {
	s.env.OnActivity(GenerateKeysActivity, mock.Anything, int64(7)).Return(nil).Once()
	s.env.OnActivity(PublishKeysActivity, mock.Anything, int64(7)).Return(nil).Once()
	s.env.OnActivity(VerifiedActivity, mock.Anything, int64(7)).Return(nil).Once()
	var at []time.Duration
	s.checksAnswer(12, &at, s.env.Now())
	s.env.ExecuteWorkflow(WorkflowName, Input{DomainID: 7})

	s.Equal(StatusVerified, s.result().Status)
	// Every minute up to 10 minutes (11 checks), then the next at 15 minutes.
	s.Len(at, 12)
	s.Equal(10*time.Minute, at[10])
	s.Equal(15*time.Minute, at[11])
}

func (s *workflowSuite) TestFailsWhenTheWindowCloses() {
	s.env.OnActivity(GenerateKeysActivity, mock.Anything, int64(7)).Return(nil).Once()
	s.env.OnActivity(PublishKeysActivity, mock.Anything, int64(7)).Return(nil).Once()
	s.env.OnActivity(FailDomainActivity, mock.Anything, int64(7), mock.Anything).Return(StatusFailed, nil).Once()
	var at []time.Duration
	s.checksAnswer(0, &at, s.env.Now())
	s.env.ExecuteWorkflow(WorkflowName, Input{DomainID: 7})

	s.Equal(StatusFailed, s.result().Status)
	// 11 checks in the first 10 minutes, 10 more until 1 hour, 142 more every
	// 30 minutes until 72 hours; the last exactly at 72 hours.
	s.Len(at, 11+10+142)
	s.Equal(72*time.Hour, at[len(at)-1])
	s.Equal(time.Hour+30*time.Minute, at[21])
}

// verifyAfter sends the verify update after delay; the result it returns
// is filled in once the update completes (its Status is empty until then).
func (s *workflowSuite) verifyAfter(delay time.Duration) *VerifyResult {
	updated := new(VerifyResult)
	s.env.RegisterDelayedCallback(func() {
		s.env.UpdateWorkflow(VerifyUpdate, "verify-1", &testsuite.TestUpdateCallback{
			OnReject:   func(err error) { s.Fail("verify rejected", err) },
			OnAccept:   func() {},
			OnComplete: func(v interface{}, err error) { s.NoError(err); *updated = v.(VerifyResult) },
		})
	}, delay)
	return updated
}

func (s *workflowSuite) TestVerifyNowInTheMiddle() {
	s.env.OnActivity(GenerateKeysActivity, mock.Anything, int64(7)).Return(nil).Once()
	s.env.OnActivity(PublishKeysActivity, mock.Anything, int64(7)).Return(nil).Once()
	var at []time.Duration
	// Checks at 0, 1, 2, 3 minutes are pending; the verify at 3m30s is the 5th.
	s.checksAnswer(5, &at, s.env.Now())
	updated := s.verifyAfter(3*time.Minute + 30*time.Second)
	s.env.ExecuteWorkflow(WorkflowName, Input{DomainID: 7})

	s.Equal(StatusVerified, s.result().Status)
	s.Equal(StatusVerified, updated.Status, "the verify's answer")
	s.Len(at, 5)
	s.Equal(3*time.Minute+30*time.Second, at[4], "the workflow ended right after the verify, without waiting for its timer")
}

// A verify sent while the keys are still being published (the publisher
// down) checks once they are, not before: a domain verified earlier would
// send mail signed with a key receivers cannot find.
func (s *workflowSuite) TestVerifyWaitsForTheKeys() {
	start := s.env.Now()
	var published time.Duration
	s.env.OnActivity(GenerateKeysActivity, mock.Anything, int64(7)).Return(nil).Once()
	s.env.OnActivity(PublishKeysActivity, mock.Anything, int64(7)).Return(errors.New("publisher down")).Twice()
	s.env.OnActivity(PublishKeysActivity, mock.Anything, int64(7)).Return(func(context.Context, int64) error {
		published = s.env.Now().Sub(start)
		return nil
	}).Once()
	s.env.OnActivity(VerifiedActivity, mock.Anything, int64(7)).Return(nil).Once()
	var at []time.Duration
	s.checksAnswer(1, &at, start)
	updated := s.verifyAfter(500 * time.Millisecond)
	s.env.ExecuteWorkflow(WorkflowName, Input{DomainID: 7})

	s.Equal(StatusVerified, s.result().Status)
	s.Equal(StatusVerified, updated.Status, "the verify's answer")
	s.Require().NotEmpty(at)
	s.Greater(published, time.Second, "publishing was retried")
	s.GreaterOrEqual(at[0], published, "a check ran before the keys were published")
}

func (s *workflowSuite) TestRestartedWindowSkipsKeysAndCountsFromItsStart() {
	// A failed domain's new window: keys exist, the window opened 71 hours ago in
	// this test (as if continued), so the schedule is in its last step.
	start := s.env.Now().Add(-71 * time.Hour)
	var at []time.Duration
	s.checksAnswer(0, &at, s.env.Now())
	s.env.OnActivity(FailDomainActivity, mock.Anything, int64(7), mock.Anything).Return(StatusFailed, nil).Once()
	s.env.ExecuteWorkflow(WorkflowName, Input{DomainID: 7, WindowStart: start, KeysPublished: true})

	s.Equal(StatusFailed, s.result().Status)
	// Checks at 71h, 71h30, 72h relative to the window: three.
	s.Len(at, 3)
	s.Equal(time.Hour, at[2])
}

// A verify that settles the domain while the window closes (the API
// reopened the failed window, and the check passed) is not undone by the
// closing's "failed": the domain's verified effects still run. Before, the
// run ended failed with the domain verified, without domain.verified or
// its rotation.
func (s *workflowSuite) TestVerifyDuringTheClosingKeepsItsStatus() {
	start := s.env.Now().Add(-72 * time.Hour)
	s.env.OnActivity(CheckRecordsActivity, mock.Anything, int64(7)).Return(CheckResult{Status: StatusPending, Total: 4}, nil).Once()
	s.env.OnActivity(CheckRecordsActivity, mock.Anything, int64(7)).Return(CheckResult{Status: StatusVerified, Verified: 4, Total: 4}, nil).Once()
	s.env.OnActivity(FailDomainActivity, mock.Anything, int64(7), mock.MatchedBy(start.Equal)).After(time.Minute).Return(StatusFailed, nil).Once()
	s.env.OnActivity(VerifiedActivity, mock.Anything, int64(7)).Return(nil).Once()
	updated := s.verifyAfter(30 * time.Second)
	s.env.ExecuteWorkflow(WorkflowName, Input{DomainID: 7, WindowStart: start, KeysPublished: true})

	s.Equal(StatusVerified, s.result().Status)
	s.Equal(StatusVerified, updated.Status, "the verify's answer")
}

// The same when the closing answers first, while the verify's check still
// runs (DNS look-ups take longer than the closing's one update): the run
// waits for the check. Here the closing found the window reopened (its
// retry came after Verify domain), and answers pending.
func (s *workflowSuite) TestClosingWaitsForTheVerifyUnderWay() {
	start := s.env.Now().Add(-72 * time.Hour)
	s.env.OnActivity(CheckRecordsActivity, mock.Anything, int64(7)).Return(CheckResult{Status: StatusPending, Total: 4}, nil).Once()
	s.env.OnActivity(CheckRecordsActivity, mock.Anything, int64(7)).After(2*time.Minute).Return(CheckResult{Status: StatusVerified, Verified: 4, Total: 4}, nil).Once()
	s.env.OnActivity(FailDomainActivity, mock.Anything, int64(7), mock.MatchedBy(start.Equal)).After(time.Minute).Return(StatusPending, nil).Once()
	s.env.OnActivity(VerifiedActivity, mock.Anything, int64(7)).Return(nil).Once()
	updated := s.verifyAfter(30 * time.Second)
	s.env.ExecuteWorkflow(WorkflowName, Input{DomainID: 7, WindowStart: start, KeysPublished: true})

	s.Equal(StatusVerified, s.result().Status)
	s.Equal(StatusVerified, updated.Status, "the verify's answer")
}

func (s *workflowSuite) TestCustomScheduleAndPublisherRetry() {
	s.env.OnActivity(GenerateKeysActivity, mock.Anything, int64(7)).Return(nil).Once()
	s.env.OnActivity(PublishKeysActivity, mock.Anything, int64(7)).Return(errors.New("publisher down")).Once()
	s.env.OnActivity(PublishKeysActivity, mock.Anything, int64(7)).Return(nil).Once()
	var at []time.Duration
	s.checksAnswer(4, &at, s.env.Now())
	s.env.ExecuteWorkflow(WorkflowName, Input{DomainID: 7, Schedule: []Step{{Every: 10 * time.Second, Until: time.Minute}}})

	s.Equal(StatusVerified, s.result().Status)
	s.Len(at, 4)
	s.Equal(30*time.Second, at[3]-at[0])
}

func (s *workflowSuite) TestVerifyIsRejectedAfterTheEnd() {
	s.env.OnActivity(GenerateKeysActivity, mock.Anything, int64(7)).Return(nil)
	s.env.OnActivity(PublishKeysActivity, mock.Anything, int64(7)).Return(nil)
	var at []time.Duration
	s.checksAnswer(1, &at, s.env.Now())
	var progress Progress
	s.env.ExecuteWorkflow(WorkflowName, Input{DomainID: 7})
	s.Equal(StatusVerified, s.result().Status)
	v, err := s.env.QueryWorkflow(ProgressQuery)
	s.NoError(err)
	s.NoError(v.Get(&progress))
	s.Equal(StageDone, progress.Stage)
	s.Equal(1, progress.Checks)
}

func TestNextWait(t *testing.T) {
	cases := []struct {
		elapsed time.Duration
		want    time.Duration
		open    bool
	}{
		{0, time.Minute, true},
		{9 * time.Minute, time.Minute, true},
		{10 * time.Minute, 5 * time.Minute, true},
		{59 * time.Minute, 5 * time.Minute, true},
		{time.Hour, 30 * time.Minute, true},
		{71*time.Hour + 50*time.Minute, 10 * time.Minute, true},
		{72 * time.Hour, 0, false},
	}
	for _, c := range cases {
		got, open := NextWait(nil, c.elapsed)
		if got != c.want || open != c.open {
			t.Errorf("NextWait(%s) = %s %v, want %s %v", c.elapsed, got, open, c.want, c.open)
		}
	}
}

// The documented default of MAILYARD_VERIFY_SCHEDULE is the workflow's default.
func TestDocumentedDefaultSchedule(t *testing.T) {
	steps, err := config.ParseSchedule("1m/10m,5m/1h,30m/72h")
	if err != nil || len(steps) != len(DefaultSchedule) {
		t.Fatalf("%v %v", steps, err)
	}
	for i, s := range steps {
		if (Step{Every: s.Every, Until: s.Until}) != DefaultSchedule[i] {
			t.Errorf("step %d: %+v, default %+v", i, s, DefaultSchedule[i])
		}
	}
}
