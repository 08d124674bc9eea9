package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/baton-go/baton/core/outbox"
)

// hookLog records what the hooks were told, as lines.
type hookLog struct {
	mu      sync.Mutex
	lines   []string
	open    int // passes and runs started and not yet ended
	backlog []outbox.Backlog
}

type hookKey struct{}

func (h *hookLog) add(format string, args ...any) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.lines = append(h.lines, fmt.Sprintf(format, args...))
}

func (h *hookLog) PassStarted(ctx context.Context, p outbox.PassStart) context.Context {
	h.mu.Lock()
	h.open++
	h.mu.Unlock()
	return context.WithValue(ctx, hookKey{}, "pass")
}

func (h *hookLog) PassEnded(ctx context.Context, p outbox.PassEnd) {
	h.mu.Lock()
	h.open--
	h.mu.Unlock()
	if p.Outcome == outbox.PassIdle {
		return // one line per pass that did something
	}
	h.add("pass %s scanned=%d delivered=%d parked=%d retried=%d reason=%q ctx=%v",
		p.Outcome, p.Scanned, p.Delivered, p.Parked, p.Retried, p.Reason, ctx.Value(hookKey{}))
}

func (h *hookLog) RunStarted(ctx context.Context, r outbox.RunStart) context.Context {
	h.mu.Lock()
	h.open++
	h.mu.Unlock()
	if ctx.Value(hookKey{}) != "pass" {
		h.add("run %s started outside its pass's context", r.Lane)
	}
	return context.WithValue(ctx, hookKey{}, "run "+r.Lane)
}

func (h *hookLog) RunEnded(ctx context.Context, r outbox.RunEnd) {
	h.mu.Lock()
	h.open--
	h.mu.Unlock()
	h.add("run %s entries=%d delivered=%d parked=%d retried=%d err=%v reason=%q ctx=%v",
		r.Lane, r.Entries, r.Delivered, r.Parked, r.Retried, r.Err, r.Reason, ctx.Value(hookKey{}))
}

func (h *hookLog) Stuck(_ context.Context, n outbox.Notice) { h.add("stuck lane=%s", n.Lane) }

func (h *hookLog) LeaderChanged(_ context.Context, c outbox.LeaderChange) {
	h.add("leader=%v lock=%s token=%d", c.Leader, c.Lock, c.Token)
}

func (h *hookLog) BacklogSampled(_ context.Context, b outbox.Backlog) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.backlog = append(h.backlog, b)
}

func TestDriverHooks_ReportPassesRunsLeadershipAndStuck(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t)
		r.commit("a", "a", "b", "nobody", "a")
		log := &hookLog{}
		seen := make(chan any, 10)
		a := &recorder{lane: "a"}
		b := &recorder{lane: "b", answer: func(run []outbox.Entry) ([]outbox.Outcome, error) {
			return all(len(run), outbox.Park("malformed")), nil
		}}
		var calls int
		a.setAnswer(func(run []outbox.Entry) ([]outbox.Outcome, error) {
			calls++
			if calls == 2 {
				return []outbox.Outcome{outbox.Retry("engine busy")}, nil
			}
			return all(len(run), outbox.Delivered()), nil
		})
		cfg := r.config(a, b, outbox.ProcessorFunc{LaneName: "c", Func: func(ctx context.Context, run []outbox.Entry) ([]outbox.Outcome, error) {
			seen <- ctx.Value(hookKey{})
			return nil, errors.New("down")
		}})
		cfg.Hooks = log
		cfg.StuckAfter = time.Minute
		stop := r.run(cfg)
		time.Sleep(2 * cfg.ErrorDelay) // the retry, then the stuck notice
		synctest.Wait()
		r.commit("c")
		time.Sleep(cfg.IdleDelay)
		synctest.Wait()
		stop()
		if got := <-seen; got != "run c" {
			t.Errorf("Deliver's context carries %v, want the run hook's", got)
		}

		log.mu.Lock()
		defer log.mu.Unlock()
		want := []string{
			"leader=true lock=baton-outbox-driver token=1",
			`run a entries=2 delivered=2 parked=0 retried=0 err=<nil> reason="" ctx=run a`,
			`run b entries=1 delivered=0 parked=1 retried=0 err=<nil> reason="" ctx=run b`,
			`run nobody entries=1 delivered=0 parked=1 retried=0 err=<nil> reason="no processor is registered for lane \"nobody\"" ctx=run nobody`,
			`run a entries=1 delivered=0 parked=0 retried=1 err=<nil> reason="engine busy" ctx=run a`,
			`pass retry scanned=5 delivered=2 parked=2 retried=1 reason="engine busy" ctx=pass`,
			`run a entries=1 delivered=1 parked=0 retried=0 err=<nil> reason="" ctx=run a`,
			`pass progress scanned=1 delivered=1 parked=0 retried=0 reason="" ctx=pass`,
			`run c entries=1 delivered=0 parked=0 retried=1 err=down reason="" ctx=run c`,
			`pass retry scanned=1 delivered=0 parked=0 retried=1 reason="down" ctx=pass`,
			"leader=false lock=baton-outbox-driver token=1",
		}
		if !slices.Equal(log.lines, want) {
			t.Errorf("hooks were told:\n%s\nwant:\n%s", join(log.lines), join(want))
		}
		if log.open != 0 {
			t.Errorf("%d passes or runs started and never ended", log.open)
		}
		if len(log.backlog) == 0 || log.backlog[0].Dead != 2 {
			t.Errorf("backlog samples %+v, want the first to count the 2 dead letters", log.backlog)
		}
		for i := 1; i < len(log.backlog); i++ {
			if gap := log.backlog[i].At.Sub(log.backlog[i-1].At); gap < outbox.BacklogEvery {
				t.Errorf("backlog samples %v apart, want at least %v", gap, outbox.BacklogEvery)
			}
		}
	})
}

func join(lines []string) string {
	out := ""
	for _, l := range lines {
		out += "  " + l + "\n"
	}
	return out
}
