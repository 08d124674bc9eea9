package workrow_test

import (
	"testing"
	"time"

	"github.com/baton-go/baton/core/workrow"
)

func TestLadder_StepsByAttemptStaysOnTheLastRungAndHonoursALongerRetryAfter(t *testing.T) {
	steps := []time.Duration{time.Minute, 15 * time.Minute, time.Hour, 12 * time.Hour}
	for _, tc := range []struct {
		attempt    int
		retryAfter time.Duration
		want       time.Duration
	}{
		{0, 0, time.Minute},
		{1, 0, time.Minute},
		{2, 0, 15 * time.Minute},
		{4, 0, 12 * time.Hour},
		{99, 0, 12 * time.Hour},
		{1, 30 * time.Second, time.Minute}, // shorter Retry-After: the ladder wins
		{1, 2 * time.Hour, 2 * time.Hour},  // longer Retry-After wins
		{4, 24 * time.Hour, 24 * time.Hour},
	} {
		if got := workrow.Ladder(tc.attempt, steps, tc.retryAfter); got != tc.want {
			t.Errorf("Ladder(%d, …, %v) = %v; want %v", tc.attempt, tc.retryAfter, got, tc.want)
		}
	}
	if got := workrow.Ladder(3, nil, time.Second); got != time.Second {
		t.Errorf("empty ladder = %v; want the Retry-After", got)
	}
	if got := workrow.Steps(steps).Delay(2, 0); got != 15*time.Minute {
		t.Errorf("Steps.Delay = %v", got)
	}
}

func TestExponential_DoublesUpToTheCapWithoutJitter(t *testing.T) {
	e := workrow.Exponential{Initial: time.Second, Max: 10 * time.Second, Jitter: workrow.NoJitter}
	want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 10 * time.Second, 10 * time.Second}
	for i, w := range want {
		if got := e.Delay(i+1, 0); got != w {
			t.Errorf("attempt %d: %v; want %v", i+1, got, w)
		}
	}
	if got := e.Delay(1_000_000, 0); got != 10*time.Second {
		t.Errorf("a huge attempt gave %v; want the cap", got)
	}
	if got := e.Delay(1, time.Minute); got != time.Minute {
		t.Errorf("Retry-After above the cap gave %v; the remote's minute must win", got)
	}
}

func TestExponential_JitterOnlyShortensWithinTheFraction(t *testing.T) {
	e := workrow.Exponential{Initial: time.Second, Max: time.Minute, Jitter: 0.5}
	seen := map[time.Duration]bool{}
	for range 1000 {
		d := e.Delay(3, 0) // 4s before jitter
		if d > 4*time.Second || d < 2*time.Second {
			t.Fatalf("jittered delay %v outside [2s, 4s]", d)
		}
		seen[d] = true
	}
	if len(seen) < 100 {
		t.Fatalf("only %d distinct delays in 1000: the jitter is not random", len(seen))
	}
	d := workrow.Exponential{}.Delay(1, 0)
	if d > workrow.DefaultBackoffInitial || d < time.Duration(float64(workrow.DefaultBackoffInitial)*(1-workrow.DefaultJitter)) {
		t.Fatalf("default first delay %v outside the default jitter band", d)
	}
}

func TestExponential_ValidateNamesTheField(t *testing.T) {
	for _, e := range []workrow.Exponential{{Initial: -1}, {Max: -1}, {Jitter: 1.5}, {Initial: time.Hour, Max: time.Minute}} {
		if err := e.Validate(); err == nil {
			t.Errorf("%+v passed Validate", e)
		}
	}
	if err := (workrow.Exponential{}).Validate(); err != nil {
		t.Fatal(err)
	}
}
