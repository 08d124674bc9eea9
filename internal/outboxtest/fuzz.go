package outboxtest

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/baton-go/baton/core/lock"
	"github.com/baton-go/baton/core/outbox"
)

// WalkHarness is one empty outbox for NothingStallsTheWalk.
type WalkHarness struct {
	Store outbox.Store
	// Enqueue commits n entries of lane in one transaction and returns
	// their ids.
	Enqueue func(ctx context.Context, lane string, n int) ([]outbox.ID, error)
	// Locks provides the driver's leader lock.
	Locks lock.Provider
	// Delay is the driver's IdleDelay and ErrorDelay: short, so that a
	// walk that is not stalled finishes at once.
	Delay time.Duration
}

// Plan is what a processor answers to its first run, decoded from fuzz
// input by DecodePlan.
type Plan struct {
	// Outcomes answer the run one by one (Mode PlanOutcomes), or are one
	// short of the run (PlanWrongCount).
	Outcomes []outbox.Outcome
	Mode     PlanMode
	// Message is the error's text or the panic's value.
	Message string
}

// PlanMode is how the processor answers.
type PlanMode byte

// The plan modes.
const (
	PlanOutcomes PlanMode = iota
	PlanError
	PlanPanic
	PlanWrongCount
	planModes
)

// maxPlanOutcomes bounds the run a plan answers.
const maxPlanOutcomes = 8

// DecodePlan reads a plan: a mode byte, then for outcomes one
// [kind][length][reason bytes] group per outcome (kind%3: delivered, park,
// retry; bit 0x40 repeats the reason to about 10 KiB, bit 0x80 makes a retry
// a RetryAfter of length milliseconds), and for an error or a panic the
// rest as its message. Any input is a plan.
func DecodePlan(b []byte) Plan {
	if len(b) == 0 {
		return Plan{Outcomes: []outbox.Outcome{outbox.Delivered()}}
	}
	p := Plan{Mode: PlanMode(b[0]) % planModes}
	b = b[1:]
	if p.Mode == PlanError || p.Mode == PlanPanic {
		p.Message = string(b)
		return p
	}
	for len(b) >= 2 && len(p.Outcomes) < maxPlanOutcomes {
		kind, n := b[0], int(b[1])
		b = b[2:]
		n = min(n, len(b))
		reason := string(b[:n])
		b = b[n:]
		if kind&0x40 != 0 {
			reason = strings.Repeat(reason+"\x00\xff", 10<<10/(len(reason)+2))
		}
		switch kind % 3 {
		case 0:
			p.Outcomes = append(p.Outcomes, outbox.Delivered())
		case 1:
			p.Outcomes = append(p.Outcomes, outbox.Park(reason))
		default:
			if kind&0x80 != 0 {
				p.Outcomes = append(p.Outcomes, outbox.RetryAfter(reason, time.Duration(n)*time.Millisecond))
			} else {
				p.Outcomes = append(p.Outcomes, outbox.Retry(reason))
			}
		}
	}
	if len(p.Outcomes) == 0 {
		p.Outcomes = []outbox.Outcome{outbox.Delivered()}
	}
	return p
}

// entries is how many entries the plan's run has.
func (p Plan) entries() int {
	switch p.Mode {
	case PlanOutcomes:
		return len(p.Outcomes)
	case PlanWrongCount:
		return len(p.Outcomes) + 1
	}
	return 3
}

// FuzzSeeds adds the inputs that found the defects this property guards
// against: NUL bytes and invalid UTF-8 in park and retry reasons, in an
// error and a panic, a reason far too long, a wrong count.
func FuzzSeeds(f *testing.F) {
	for _, seed := range [][]byte{
		{byte(PlanOutcomes), 0, 0},
		{byte(PlanOutcomes), 1, 3, 'a', 0, 'b'},
		{byte(PlanOutcomes), 1, 2, 0xff, 0xfe},
		{byte(PlanOutcomes), 2, 3, 'a', 0, 'b', 0, 0},
		{byte(PlanOutcomes), 2, 2, 0xc3, '('},
		{byte(PlanOutcomes), 0x82, 5, 'b', 'u', 's', 'y', 0},
		{byte(PlanOutcomes), 0x41, 4, 'b', 'o', 'd', 'y'},
		{byte(PlanOutcomes), 0x42, 1, 0x07},
		{byte(PlanOutcomes), 0, 0, 1, 4, '4', '0', '9', 0, 1, 2, 'o', 'k', 2, 3, '\n', '\t', 0x1b, 0, 0},
		{byte(PlanOutcomes), 1, 9, 0xe2, 0x80, 0xa8, 0xef, 0xbb, 0xbf, 0xed, 0xa0, 0x80},
		append([]byte{byte(PlanError)}, "transport: \x00\xff"...),
		append([]byte{byte(PlanPanic)}, "nil map\x00"...),
		{byte(PlanWrongCount), 0, 0, 1, 1, 0},
	} {
		f.Add(seed)
	}
}

// NothingStallsTheWalk runs a driver whose processor answers its first run
// with the plan and delivers everything after, and fails t unless the walk
// reaches the last entry (nothing a processor returns can keep a settlement
// from committing), every settlement commits, and every reason stored or
// notified is storable text: valid UTF-8, printable, no NUL, at most
// outbox.MaxReasonLength bytes, and unchanged when it was such already.
func NothingStallsTheWalk(t *testing.T, h WalkHarness, plan []byte) {
	t.Helper()
	p := DecodePlan(plan)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const lane = "fuzz"
	ids, err := h.Enqueue(ctx, lane, p.entries())
	if err != nil {
		t.Fatalf("enqueue: %v", err)
	}
	last := slices.MaxFunc(ids, outbox.ID.Compare)

	var (
		mu      sync.Mutex
		first   = true
		answers = map[outbox.ID]outbox.Outcome{}
		notices []outbox.Notice
	)
	// The first run gets the plan. After it, an entry the plan parked is
	// parked again whenever it comes back (a destination that refused it
	// refuses it again), and everything else is delivered.
	proc := outbox.ProcessorFunc{LaneName: lane, Func: func(_ context.Context, run []outbox.Entry) ([]outbox.Outcome, error) {
		mu.Lock()
		defer mu.Unlock()
		if !first {
			out := make([]outbox.Outcome, len(run))
			for i, e := range run {
				out[i] = outbox.Delivered()
				if o, ok := answers[e.ID]; ok && o.Kind == outbox.KindPark {
					out[i] = o
				}
			}
			return out, nil
		}
		first = false
		switch p.Mode {
		case PlanError:
			return nil, errors.New(p.Message)
		case PlanPanic:
			panic(p.Message)
		case PlanOutcomes:
			// What the walk applies: everything up to the first retry.
			for i, o := range p.Outcomes {
				answers[run[i].ID] = o
				if o.Kind == outbox.KindRetry {
					break
				}
			}
		}
		return slices.Clone(p.Outcomes), nil
	}}
	store := &settleRecorder{Store: h.Store}
	d, err := outbox.NewDriver(outbox.Config{
		Store: store, Locks: h.Locks, Processors: []outbox.Processor{proc},
		Notify: func(_ context.Context, n outbox.Notice) error {
			mu.Lock()
			defer mu.Unlock()
			notices = append(notices, n)
			return nil
		},
		IdleDelay: h.Delay, ErrorDelay: h.Delay, StuckAfter: h.Delay, LeaderWait: time.Second,
		RetentionDisabled: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = d.Run(ctx)
	}()
	defer func() {
		cancel()
		<-done
	}()

	deadline := time.Now().Add(30 * time.Second)
	for {
		st, err := h.Store.State(ctx)
		if err != nil {
			t.Fatalf("state: %v", err)
		}
		if cur, err := outbox.CursorFromState(st); err == nil && cur.ID == last {
			break
		}
		if time.Now().After(deadline) {
			errs := store.errs()
			if len(errs) > 0 {
				t.Fatalf("the walk did not reach its last entry within 30s; %d settlements failed, the last: %v", len(errs), errs[len(errs)-1])
			}
			t.Fatal("the walk did not reach its last entry within 30s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	<-done

	if errs := store.errs(); len(errs) > 0 {
		t.Errorf("%d settlements failed, the first: %v", len(errs), errs[0])
	}
	mu.Lock()
	defer mu.Unlock()
	for id, o := range answers {
		if o.Kind != outbox.KindPark {
			continue
		}
		dl, err := h.Store.GetDead(context.Background(), id)
		if err != nil {
			t.Errorf("entry %s was parked, but its dead letter: %v", id, err)
			continue
		}
		checkStored(t, "a dead letter's error", dl.Error, o.Reason)
	}
	st, err := h.Store.State(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := st[outbox.KeyLastError]; ok {
		checkStored(t, "last_error", v, "")
	}
	for _, n := range notices {
		checkStored(t, "a notice's last error", n.LastError, "")
	}
}

// checkStored fails t unless stored is storable text, and equal to given
// when given was storable already.
func checkStored(t *testing.T, what, stored, given string) {
	t.Helper()
	switch {
	case !utf8.ValidString(stored):
		t.Errorf("%s is not valid UTF-8: %q", what, stored)
	case strings.IndexFunc(stored, func(r rune) bool { return !unicode.IsPrint(r) }) >= 0:
		t.Errorf("%s holds a character that is not printable: %q", what, stored)
	case len(stored) > outbox.MaxReasonLength:
		t.Errorf("%s is %d bytes, more than outbox.MaxReasonLength (%d)", what, len(stored), outbox.MaxReasonLength)
	case given != "" && utf8.ValidString(given) && len(given) <= outbox.MaxReasonLength &&
		strings.IndexFunc(given, func(r rune) bool { return !unicode.IsPrint(r) }) < 0 && stored != given:
		t.Errorf("%s is %q; the reason %q was storable as it was", what, stored, given)
	}
}

// settleRecorder records the settlements that failed for another reason
// than a moved cursor.
type settleRecorder struct {
	outbox.Store
	mu     sync.Mutex
	failed []error
}

func (s *settleRecorder) Settle(ctx context.Context, st outbox.Settlement) error {
	err := s.Store.Settle(ctx, st)
	if err != nil && !errors.Is(err, outbox.ErrCursorMoved) && ctx.Err() == nil {
		s.mu.Lock()
		s.failed = append(s.failed, err)
		s.mu.Unlock()
	}
	return err
}

func (s *settleRecorder) errs() []error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.failed)
}
