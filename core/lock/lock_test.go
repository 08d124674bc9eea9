package lock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/baton-go/baton/core/lock"
)

func TestValidateName_RejectsWhatNoProviderCanStore(t *testing.T) {
	bad := map[string]string{
		"empty":     "",
		"too long":  strings.Repeat("a", lock.MaxNameLength+1),
		"bad utf-8": "a\xffb",
		"nul byte":  "a\x00b",
	}
	for what, name := range bad {
		err := lock.ValidateName(name)
		if !errors.Is(err, lock.ErrInvalidName) {
			t.Errorf("%s: err = %v, want ErrInvalidName", what, err)
		}
	}
	for _, name := range []string{"a", strings.Repeat("é", lock.MaxNameLength/2), "outbox:driver/1"} {
		if err := lock.ValidateName(name); err != nil {
			t.Errorf("ValidateName(%q) = %v", name, err)
		}
	}
}

func TestAcquireOptions_NegativeWaitIsInvalid(t *testing.T) {
	err := lock.CheckAcquire("x", lock.AcquireOptions{Wait: -time.Second})
	if !errors.Is(err, lock.ErrInvalidOptions) || !strings.Contains(err.Error(), "Wait") {
		t.Fatalf("err = %v, want ErrInvalidOptions naming Wait", err)
	}
}

func TestWaitFor_TriesOnceWhenWaitIsZero(t *testing.T) {
	calls := 0
	err := lock.WaitFor(context.Background(), 0, lock.Backoff{}, func(context.Context) (bool, <-chan struct{}, error) {
		calls++
		return false, nil, nil
	})
	if !errors.Is(err, lock.ErrNotAcquired) || calls != 1 {
		t.Fatalf("err = %v after %d calls, want ErrNotAcquired after 1", err, calls)
	}
}

func TestWaitFor_GivesUpWhenWaitElapses(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		var last time.Duration
		err := lock.WaitFor(context.Background(), time.Second, lock.Backoff{}, func(context.Context) (bool, <-chan struct{}, error) {
			last = time.Since(start)
			return false, nil, nil
		})
		if !errors.Is(err, lock.ErrNotAcquired) {
			t.Fatalf("err = %v", err)
		}
		if got := time.Since(start); got != time.Second {
			t.Fatalf("gave up after %v, want 1s", got)
		}
		if last != time.Second {
			t.Fatalf("last attempt at %v, want one at the end of the wait", last)
		}
	})
}

func TestWaitFor_BacksOffUpToMax(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var at []time.Duration
		start := time.Now()
		lock.WaitFor(context.Background(), 2*time.Second, lock.Backoff{Min: 10 * time.Millisecond, Max: 100 * time.Millisecond},
			func(context.Context) (bool, <-chan struct{}, error) {
				at = append(at, time.Since(start))
				return false, nil, nil
			})
		for i := 1; i < len(at); i++ {
			if gap := at[i] - at[i-1]; gap > 100*time.Millisecond {
				t.Fatalf("gap %v between attempts exceeds Max", gap)
			}
		}
		// 2s at most 100ms apart, at least 50ms apart (jitter halves at most).
		if len(at) < 20 || len(at) > 60 {
			t.Fatalf("%d attempts in 2s, want between 20 and 60", len(at))
		}
	})
}

func TestWaitFor_StopsWhenContextEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		start := time.Now()
		err := lock.WaitFor(ctx, lock.WaitForever, lock.Backoff{}, func(context.Context) (bool, <-chan struct{}, error) {
			return false, nil, nil
		})
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("err = %v, want the context's error", err)
		}
		if got := time.Since(start); got != 300*time.Millisecond {
			t.Fatalf("returned after %v, want when ctx ended (300ms)", got)
		}
	})
}

func TestWaitFor_FreedChannelWakesBeforeBackoff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		freed := make(chan struct{})
		start := time.Now()
		calls := 0
		go func() {
			time.Sleep(5 * time.Second)
			close(freed)
		}()
		err := lock.WaitFor(context.Background(), time.Minute, lock.Backoff{Min: time.Hour, Max: time.Hour},
			func(context.Context) (bool, <-chan struct{}, error) {
				calls++
				return calls == 2, freed, nil
			})
		if err != nil {
			t.Fatal(err)
		}
		if got := time.Since(start); got != 5*time.Second {
			t.Fatalf("acquired after %v, want right when freed (5s)", got)
		}
	})
}

func TestWaitFor_AttemptErrorEndsTheWait(t *testing.T) {
	boom := errors.New("boom")
	err := lock.WaitFor(context.Background(), lock.WaitForever, lock.Backoff{}, func(context.Context) (bool, <-chan struct{}, error) {
		return false, nil, boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("err = %v", err)
	}
}
