package rotation

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/suite"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"
)

type workflowSuite struct {
	suite.Suite
	testsuite.WorkflowTestSuite
	env *testsuite.TestWorkflowEnvironment
}

func TestWorkflow(t *testing.T) { suite.Run(t, new(workflowSuite)) }

const domainID = int64(7)

var testInput = Input{DomainID: domainID, Retain: 7 * 24 * time.Hour, RecheckEvery: 10 * time.Minute}

func (s *workflowSuite) SetupTest() {
	s.env = s.NewTestWorkflowEnvironment()
	s.env.RegisterWorkflowWithOptions(Workflow, workflow.RegisterOptions{Name: WorkflowName})
	for name, fn := range map[string]any{
		LoadPlanActivity:       func(context.Context, int64) (Plan, error) { return Plan{}, nil },
		BeginActivity:          func(context.Context, int64) (Status, error) { return Status{}, nil },
		ConfirmStandbyActivity: func(context.Context, int64) (bool, error) { return false, nil },
		SwitchActivity:         func(context.Context, int64) (Status, error) { return Status{}, nil },
		ReplaceActivity:        func(context.Context, int64) error { return nil },
	} {
		s.env.RegisterActivityWithOptions(fn, activity.RegisterOptions{Name: name})
	}
}

func (s *workflowSuite) AfterTest(_, _ string) { s.env.AssertExpectations(s.T()) }

var (
	begun    = Status{Status: StatusWaitingForDNS, ActiveSelector: "tok-1", NextSelector: "tok-2"}
	switched = Status{Status: StatusSwitched, ActiveSelector: "tok-2", NextSelector: "tok-1"}
)

// expectRotation answers the rotation steps, recording when each ran (since
// start). The standby key becomes visible on the visibleAt-th DNS check.
func (s *workflowSuite) expectRotation(visibleAt int, at map[string][]time.Duration, start time.Time) {
	record := func(name string) { at[name] = append(at[name], s.env.Now().Sub(start)) }
	s.env.OnActivity(BeginActivity, mock.Anything, domainID).Return(func(context.Context, int64) (Status, error) {
		record("begin")
		return begun, nil
	}).Once()
	checks := 0
	s.env.OnActivity(ConfirmStandbyActivity, mock.Anything, domainID).Return(func(context.Context, int64) (bool, error) {
		record("confirm")
		checks++
		return checks >= visibleAt, nil
	}).Times(visibleAt)
	s.env.OnActivity(SwitchActivity, mock.Anything, domainID).Return(func(context.Context, int64) (Status, error) {
		record("switch")
		return switched, nil
	}).Once()
	s.env.OnActivity(ReplaceActivity, mock.Anything, domainID).Return(func(context.Context, int64) error {
		record("replace")
		return nil
	}).Once()
}

// continuedAsNew asserts the cycle ended by continuing as new.
func (s *workflowSuite) continuedAsNew() {
	s.True(s.env.IsWorkflowCompleted())
	var can *workflow.ContinueAsNewError
	s.Require().True(errors.As(s.env.GetWorkflowError(), &can), "want continue-as-new, got %v", s.env.GetWorkflowError())
	// By name: several workflow functions share the name Workflow.
	s.Equal(WorkflowName, can.WorkflowType.Name)
}

func (s *workflowSuite) TestAutomaticRotationWaitsForTheIntervalAndTheCNAME() {
	start := s.env.Now()
	// Loaded at the start, and again when the interval is up.
	s.env.OnActivity(LoadPlanActivity, mock.Anything, domainID).Return(
		Plan{Active: true, Enabled: true, NextRotationAt: start.Add(180 * 24 * time.Hour)}, nil).Twice()
	at := map[string][]time.Duration{}
	s.expectRotation(3, at, start)
	s.env.ExecuteWorkflow(WorkflowName, testInput)

	s.continuedAsNew()
	interval := 180 * 24 * time.Hour
	s.Equal([]time.Duration{interval}, at["begin"])
	// Not visible twice: checked again every RecheckEvery.
	s.Equal([]time.Duration{interval, interval + 10*time.Minute, interval + 20*time.Minute}, at["confirm"])
	s.Equal([]time.Duration{interval + 20*time.Minute}, at["switch"])
	// The old key stays published for Retain after the switch.
	s.Equal([]time.Duration{interval + 20*time.Minute + testInput.Retain}, at["replace"])
}

func (s *workflowSuite) TestRotateRequestAnswersOnceBegunAndRefusesASecond() {
	start := s.env.Now()
	s.env.OnActivity(LoadPlanActivity, mock.Anything, domainID).Return(
		Plan{Active: true, Enabled: true, NextRotationAt: start.Add(180 * 24 * time.Hour)}, nil).Once()
	at := map[string][]time.Duration{}
	s.expectRotation(1, at, start)

	var answer Status
	var answerErr, secondErr error
	s.env.RegisterDelayedCallback(func() {
		s.env.UpdateWorkflow(RotateUpdate, "first", &testsuite.TestUpdateCallback{
			OnReject:   func(err error) { answerErr = err },
			OnAccept:   func() {},
			OnComplete: func(v any, err error) { answerErr = err; answer, _ = v.(Status) },
		})
	}, time.Hour)
	s.env.RegisterDelayedCallback(func() {
		s.env.UpdateWorkflow(RotateUpdate, "second", &testsuite.TestUpdateCallback{
			OnReject:   func(err error) { secondErr = err },
			OnAccept:   func() { s.Fail("a second rotate was accepted during a rotation") },
			OnComplete: func(any, error) {},
		})
	}, 2*time.Hour)
	s.env.ExecuteWorkflow(WorkflowName, testInput)

	s.continuedAsNew()
	s.NoError(answerErr)
	s.Equal(begun, answer)
	s.Equal([]time.Duration{time.Hour}, at["begin"])
	var appErr *temporal.ApplicationError
	s.Require().True(errors.As(secondErr, &appErr), "second rotate: %v", secondErr)
	s.Equal(ErrInProgressType, appErr.Type())
}

func (s *workflowSuite) TestNewSettingsRearmTheTimer() {
	start := s.env.Now()
	// Off at first; after the signal, on and due in one day.
	s.env.OnActivity(LoadPlanActivity, mock.Anything, domainID).Return(Plan{Active: true, Enabled: false}, nil).Once()
	s.env.OnActivity(LoadPlanActivity, mock.Anything, domainID).Return(
		Plan{Active: true, Enabled: true, NextRotationAt: start.Add(30 * time.Hour)}, nil).Twice()
	at := map[string][]time.Duration{}
	s.expectRotation(1, at, start)
	s.env.RegisterDelayedCallback(func() { s.env.SignalWorkflow(SettingsSignal, nil) }, 6*time.Hour)
	s.env.ExecuteWorkflow(WorkflowName, testInput)

	s.continuedAsNew()
	s.Equal([]time.Duration{30 * time.Hour}, at["begin"])
}

// When the interval is up the plan is loaded again before rotating:
// rotation turned off by settings whose signal never reached the run (the
// API answered 503) is not made.
func (s *workflowSuite) TestTheIntervalUpReloadsThePlan() {
	start := s.env.Now()
	s.env.OnActivity(LoadPlanActivity, mock.Anything, domainID).Return(
		Plan{Active: true, Enabled: true, NextRotationAt: start.Add(time.Hour)}, nil).Once()
	s.env.OnActivity(LoadPlanActivity, mock.Anything, domainID).Return(Plan{Active: true, Enabled: false}, nil).Once()
	s.env.OnActivity(BeginActivity, mock.Anything, domainID).Return(begun, nil).
		Run(func(mock.Arguments) { s.Fail("rotated although the reloaded plan has rotation off") }).Maybe()
	s.env.RegisterDelayedCallback(s.env.CancelWorkflow, 3*time.Hour)
	s.env.ExecuteWorkflow(WorkflowName, testInput)
	s.True(s.env.IsWorkflowCompleted())
}

func (s *workflowSuite) TestResumesARotationStoppedHalfWay() {
	start := s.env.Now()
	s.env.OnActivity(LoadPlanActivity, mock.Anything, domainID).Return(Plan{Active: true, Enabled: true, Status: StatusSwitched}, nil).Once()
	s.env.OnActivity(BeginActivity, mock.Anything, domainID).Return(switched, nil).Once()
	var replacedAt time.Duration
	s.env.OnActivity(ReplaceActivity, mock.Anything, domainID).Return(func(context.Context, int64) error {
		replacedAt = s.env.Now().Sub(start)
		return nil
	}).Once()
	s.env.ExecuteWorkflow(WorkflowName, testInput)

	s.continuedAsNew()
	// Never switched back: Switch and Confirm were not called.
	s.Equal(testInput.Retain, replacedAt)
}

func (s *workflowSuite) TestAPublisherOutageDelaysTheReplacement() {
	start := s.env.Now()
	s.env.OnActivity(LoadPlanActivity, mock.Anything, domainID).Return(Plan{Active: true, Enabled: true, NextRotationAt: start}, nil).Once()
	s.env.OnActivity(BeginActivity, mock.Anything, domainID).Return(begun, nil).Once()
	s.env.OnActivity(ConfirmStandbyActivity, mock.Anything, domainID).Return(true, nil).Once()
	s.env.OnActivity(SwitchActivity, mock.Anything, domainID).Return(switched, nil).Once()
	down := errors.New("dns update refused: connection refused")
	s.env.OnActivity(ReplaceActivity, mock.Anything, domainID).Return(down).Times(4)
	s.env.OnActivity(ReplaceActivity, mock.Anything, domainID).Return(nil).Once()
	s.env.ExecuteWorkflow(WorkflowName, testInput)

	s.continuedAsNew()
}

func (s *workflowSuite) TestADeletedDomainEndsTheWorkflow() {
	s.env.OnActivity(LoadPlanActivity, mock.Anything, domainID).Return(Plan{Active: true, Enabled: true, NextRotationAt: s.env.Now()}, nil).Once()
	s.env.OnActivity(BeginActivity, mock.Anything, domainID).Return(Status{},
		temporal.NewNonRetryableApplicationError("domain 7 is deleted", ErrDomainGoneType, nil)).Once()
	s.env.ExecuteWorkflow(WorkflowName, testInput)

	s.True(s.env.IsWorkflowCompleted())
	s.NoError(s.env.GetWorkflowError())
}

func (s *workflowSuite) TestANotVerifiedDomainHasNothingToRotate() {
	s.env.OnActivity(LoadPlanActivity, mock.Anything, domainID).Return(Plan{Active: false}, nil).Once()
	s.env.ExecuteWorkflow(WorkflowName, testInput)

	s.True(s.env.IsWorkflowCompleted())
	s.NoError(s.env.GetWorkflowError())
}

// While the standby key stays invisible (the customer removed the CNAME),
// the run ends after maxDNSChecksPerRun checks by continuing as new, before
// its history grows to Temporal's limit; the next run resumes the waiting
// rotation (TestResumesARotationStoppedHalfWay).
func (s *workflowSuite) TestALongDNSWaitContinuesAsNew() {
	defer maxDNSChecksPerRun.Store(maxDNSChecksPerRun.Load())
	maxDNSChecksPerRun.Store(4)
	s.env.OnActivity(LoadPlanActivity, mock.Anything, domainID).Return(Plan{Active: true, Enabled: true, NextRotationAt: s.env.Now()}, nil).Once()
	s.env.OnActivity(BeginActivity, mock.Anything, domainID).Return(begun, nil).Once()
	s.env.OnActivity(ConfirmStandbyActivity, mock.Anything, domainID).Return(false, nil).Times(4)
	s.env.ExecuteWorkflow(WorkflowName, testInput)

	s.continuedAsNew()
	// Never switched: Switch was not called.
}

// Settings signalled while the plan loads are not lost: the plan is loaded
// again, and the new settings' timer runs.
func (s *workflowSuite) TestSettingsDuringThePlanLoadAreKept() {
	start := s.env.Now()
	s.env.OnActivity(LoadPlanActivity, mock.Anything, domainID).Return(Plan{Active: true, Enabled: false}, nil).After(time.Minute).Once()
	s.env.OnActivity(LoadPlanActivity, mock.Anything, domainID).Return(
		Plan{Active: true, Enabled: true, NextRotationAt: start.Add(30 * time.Hour)}, nil).Twice()
	at := map[string][]time.Duration{}
	s.expectRotation(1, at, start)
	s.env.RegisterDelayedCallback(func() { s.env.SignalWorkflow(SettingsSignal, nil) }, 30*time.Second)
	s.env.ExecuteWorkflow(WorkflowName, testInput)

	s.continuedAsNew()
	s.Equal([]time.Duration{30 * time.Hour}, at["begin"])
}
