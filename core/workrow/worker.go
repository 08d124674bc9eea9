package workrow

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"time"

	"github.com/baton-go/baton/core/health"
)

// Worker claims batches of rows from a Store, runs the Handler for each row
// with no transaction or lock held, and finalizes the outcomes.
//
// Up to Concurrency handlers run at once, fed by one claim loop per Run. The
// loop keeps at most max(Concurrency, BatchSize) rows in hand (claimed, their
// handler not yet returned) and claims the next batch as soon as a whole
// batch fits, so handlers that free up are fed without waiting for the rest
// of the batch, unless too many finished batches are still being finalized
// (rows awaiting their finalize stay in the claim index, where every claim
// has to step over them). When the hand
// holds several batches, the loop has up to Concurrency/BatchSize claims in
// flight (at most MaxClaimsInFlight) for as long as its claims come back
// full: one claim after another, each a commit, cannot keep many fast
// handlers fed from small batches. Rows start in queue order, the order of
// the claims (two claims in flight may start in either order), but with
// Concurrency above 1 they may finish, and be finalized, out of order.
//
// While a batch is in hand, a goroutine of its own renews the lease of the
// rows not yet finalized every RenewEvery. A renewal that finds a row taken
// by another worker cancels that row's handler (cause ErrNotOwned) and
// drops its outcome; when no renewal succeeds before the lease ends, the
// batch's running handlers are cancelled (cause ErrLeaseExpired), no further
// row of the batch is started, and the rows not started are released.
// Outcomes are finalized together (FinalizeMany) when every row of the batch
// is done or when the oldest has waited FlushInterval; each finalize is
// guarded by the batch's lock id, so a row lost meanwhile is logged and
// never overwritten. Over a Store that is a ClaimsFinalizer, the batches
// that finish while one batch's last finalize is in flight share the next
// one: a call, and one commit, for several claims.
type Worker[K comparable, R any] struct {
	cfg    Config[K, R]
	status health.Tracker
}

// NewWorker validates cfg and returns a Worker. Nothing runs until Run or
// RunBatch.
func NewWorker[K comparable, R any](cfg Config[K, R]) (*Worker[K, R], error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Worker[K, R]{cfg: cfg}, nil
}

// Run claims and works batches until ctx ends, then finalizes the outcomes
// it has, releases the rows in hand it did not start, and returns nil once
// every batch is handed back. A claim that found nothing waits IdleDelay,
// or, over a Store that can wake it (Waker) and without PollOnly, until a
// signalled insert commits; a store error is logged and waits ErrorDelay.
// A listening Run holds a session of its own (a database connection). Run may be called from several
// goroutines at once: each call is one claim loop with its own Concurrency
// handlers, and the caller owns its goroutine.
func (w *Worker[K, R]) Run(ctx context.Context) error {
	w.status.Started(time.Now().Add(w.pace()))
	defer w.status.Stopped()
	r := w.start(ctx)
	defer r.stop()
	for range r.claims - 1 {
		r.claimers.Go(func() { r.claimAlongside(ctx) })
	}
	k := w.newWake()
	defer k.close()
	for ctx.Err() == nil {
		var pause time.Duration
		idle := false
		select {
		case err := <-r.failed:
			w.cfg.Logger.WarnContext(ctx, "baton: work row batch failed", "err", err, "retry_in", w.cfg.ErrorDelay)
			pause = w.cfg.ErrorDelay
		default:
			b, ok, err := r.claim(ctx)
			if !ok {
				return nil
			}
			switch {
			case ctx.Err() != nil:
				return nil
			case err != nil:
				w.cfg.Logger.WarnContext(ctx, "baton: work row batch failed", "err", err, "retry_in", w.cfg.ErrorDelay)
				pause = w.cfg.ErrorDelay
			case b == nil:
				pause, idle = w.cfg.IdleDelay, true
			default:
				k.claimed(ctx)
			}
		}
		if idle {
			if !k.rest(ctx, pause) { // a signal, or IdleDelay
				return nil
			}
			continue
		}
		if pause > 0 {
			t := time.NewTimer(pause)
			select {
			case <-ctx.Done():
				t.Stop()
				return nil
			case <-t.C:
			}
		}
	}
	return nil
}

// RunBatch claims one batch and works it to the end, with up to
// Concurrency handlers at once. It returns how many rows it claimed (0 when
// nothing was due) and the claim, finalize or release error, if any. When
// ctx ends mid-batch, the running handlers' ctx ends with it; the outcomes
// already decided are still finalized and the rest of the batch is
// released, within StoreTimeout.
func (w *Worker[K, R]) RunBatch(ctx context.Context) (int, error) {
	r := w.start(ctx)
	defer r.stop()
	b, err := w.claim(ctx)
	if b == nil {
		return 0, err
	}
	r.add(b)
	<-b.ended
	return len(b.rows), b.err
}

// claim takes one batch with a fresh lock id; nil when nothing was due.
func (w *Worker[K, R]) claim(ctx context.Context) (*batch[K, R], error) {
	start := time.Now()
	spec := ClaimSpec{
		LockID:     NewLockID(),
		Now:        start,
		LeaseUntil: start.Add(w.cfg.Lease),
		BatchSize:  w.cfg.BatchSize,
		Eligible:   w.cfg.Eligible,
		Order:      w.cfg.Order,
		OnClaim:    w.cfg.OnClaim,
	}
	cctx, cancel := context.WithTimeout(ctx, w.cfg.StoreTimeout)
	rows, err := w.cfg.Store.Claim(cctx, spec)
	cancel()
	w.claimed(ctx, len(rows), start, err)
	if err != nil {
		return nil, fmt.Errorf("baton/workrow: claim: %w", err)
	}
	if len(rows) == 0 {
		return nil, nil
	}
	return &batch[K, R]{
		w:          w,
		log:        w.cfg.Logger.With("lock_id", spec.LockID.String()),
		lock:       spec.LockID,
		rows:       rows,
		state:      make([]rowState, len(rows)),
		cancel:     make([]context.CancelCauseFunc, len(rows)),
		finals:     make([]Final[K], len(rows)),
		validUntil: start.Add(w.cfg.Lease),
		decided:    make(chan struct{}, 1),
		kinds:      w.kinds(len(rows)),
		left:       len(rows),
		worked:     make(chan struct{}),
		ended:      make(chan struct{}),
	}, nil
}

// run is one claim loop's handlers and the batches it holds. The claim loop
// adds batches; Concurrency handler goroutines take their rows in claim
// order; each batch, once all its rows are done, is finalized and released
// by a goroutine of its own. stop waits for all of them.
type run[K comparable, R any] struct {
	w        *Worker[K, R]
	ctx      context.Context
	capacity int // most rows in hand: max(Concurrency, BatchSize)
	// claims is how many claims may be in flight: the loop's own, and
	// claims-1 goroutines (claimers) that claim alongside it while the
	// queue is busy.
	claims   int
	claimers sync.WaitGroup

	work   chan item[K, R] // rows in hand not yet taken by a handler
	quit   chan struct{}   // closed by stop: handlers return
	room   chan struct{}   // a row or a batch left the hand
	failed chan error      // a batch's finalize or release failed

	mu       sync.Mutex
	inHand   int // rows claimed whose handler has not returned (or that were skipped)
	reserved int // rows of the claims in flight, BatchSize each
	ending   int // batches whose rows are all done, being finalized and released
	// busy is closed while the last claim came back full: the claimers
	// alongside the loop claim only then.
	busy   chan struct{}
	isBusy bool

	handlers sync.WaitGroup
	batches  sync.WaitGroup

	// finalizer is the Store as a ClaimsFinalizer, nil when it is not
	// one: then each batch ends on its own. finMu guards the batches
	// queued for the next FinalizeClaims and whether one is in flight.
	finalizer  ClaimsFinalizer[K]
	finMu      sync.Mutex
	finQueue   []*batch[K, R]
	finalizing bool
}

type item[K comparable, R any] struct {
	b *batch[K, R]
	i int
}

func (w *Worker[K, R]) start(ctx context.Context) *run[K, R] {
	capacity := max(w.cfg.Concurrency, w.cfg.BatchSize)
	r := &run[K, R]{
		w:        w,
		ctx:      ctx,
		capacity: capacity,
		claims:   min(max(1, w.cfg.Concurrency/w.cfg.BatchSize), MaxClaimsInFlight),
		busy:     make(chan struct{}),
		work:     make(chan item[K, R], capacity),
		quit:     make(chan struct{}),
		room:     make(chan struct{}, 1),
		failed:   make(chan error, 1),
	}
	r.finalizer, _ = w.cfg.Store.(ClaimsFinalizer[K])
	for range w.cfg.Concurrency {
		r.handlers.Go(r.handle)
	}
	return r
}

// stop ends the handlers after the rows they are on, skips the rows nobody
// took (their batches release them), and waits until every batch is
// finalized and released.
func (r *run[K, R]) stop() {
	r.claimers.Wait() // they end with the Run's ctx, after handing in what they claimed
	close(r.quit)
	r.handlers.Wait()
	for drained := false; !drained; {
		select {
		case it := <-r.work:
			r.done(it)
		default:
			drained = true
		}
	}
	r.batches.Wait()
}

// reserve waits until a whole batch fits in hand beside the claims in
// flight, and fewer than twice as many batches as claims may be in flight
// are being claimed or finalized (with one claim, it overlaps one
// finalize), then reserves the batch's room; false when ctx ended first.
// The second bound keeps fast handlers from running ahead of the
// finalizes: every row not yet finalized stays in the claim index, where
// each claim has to step over it, so batches piling up behind their
// finalizes slow the claims down.
func (r *run[K, R]) reserve(ctx context.Context) bool {
	for {
		r.mu.Lock()
		b := r.w.cfg.BatchSize
		ok := r.inHand+r.reserved+b <= r.capacity && r.ending+r.reserved/b < 2*r.claims
		if ok {
			r.reserved += b
		}
		r.mu.Unlock()
		if ok {
			r.signalRoom() // another claimer may fit too
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-r.room:
		}
	}
}

// claim reserves room, claims a batch and puts it in hand; ok is false
// when ctx ended before a claim was made.
func (r *run[K, R]) claim(ctx context.Context) (b *batch[K, R], ok bool, err error) {
	if !r.reserve(ctx) {
		return nil, false, nil
	}
	b, err = r.w.claim(ctx)
	if b != nil {
		r.add(b) // even when ctx ended meanwhile: the batch must be handed back
	}
	r.mu.Lock()
	r.reserved -= r.w.cfg.BatchSize // after add: the room never looks larger than it is
	full := err == nil && b != nil && len(b.rows) == r.w.cfg.BatchSize
	switch {
	case full && !r.isBusy:
		r.isBusy = true
		close(r.busy)
	case !full && r.isBusy:
		r.isBusy = false
		r.busy = make(chan struct{})
	}
	r.mu.Unlock()
	r.signalRoom()
	return b, true, err
}

// claimAlongside claims beside the loop while its claims come back full,
// until ctx ends. A short claim, an empty one or a failed one ends the
// busy spell: the loop alone then waits, listens and retries.
func (r *run[K, R]) claimAlongside(ctx context.Context) {
	for {
		r.mu.Lock()
		busy := r.busy
		r.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-busy:
		}
		_, ok, err := r.claim(ctx)
		switch {
		case !ok || ctx.Err() != nil:
			return
		case err != nil:
			r.w.cfg.Logger.WarnContext(ctx, "baton: work row batch failed", "err", err)
		}
	}
}

func (r *run[K, R]) signalRoom() {
	select {
	case r.room <- struct{}{}:
	default:
	}
}

// add puts a claimed batch in hand: its keeper starts, its rows queue for
// the handlers, and a goroutine finalizes and releases it once they are
// done.
func (r *run[K, R]) add(b *batch[K, R]) {
	r.mu.Lock()
	r.inHand += len(b.rows)
	r.mu.Unlock()
	b.begin(r.ctx)
	for i := range b.rows {
		r.work <- item[K, R]{b, i} // never blocks: the channel holds capacity rows
	}
	r.batches.Go(func() {
		<-b.worked
		if r.finalizer == nil {
			b.err = b.end(r.ctx)
			r.ended(b)
			return
		}
		b.stopKeeper()
		r.endTogether(b)
	})
}

// ended hands back a batch that end has finished.
func (r *run[K, R]) ended(b *batch[K, R]) {
	close(b.ended)
	if b.err != nil {
		select {
		case r.failed <- b.err:
		default:
		}
	}
	r.mu.Lock()
	r.ending--
	r.mu.Unlock()
	r.signalRoom()
}

// endTogether ends b with every other batch that is ready meanwhile, in
// one FinalizeClaims call: the first batch to arrive while no call is in
// flight makes the calls, for itself and for every batch that queued
// behind it, until the queue is empty; the others only queue. So the
// batches that finish during one finalize share the next one, and a
// lone batch is finalized at once.
func (r *run[K, R]) endTogether(b *batch[K, R]) {
	r.finMu.Lock()
	r.finQueue = append(r.finQueue, b)
	if r.finalizing {
		r.finMu.Unlock()
		return
	}
	r.finalizing = true
	for {
		group := r.finQueue
		r.finQueue = nil
		if len(group) == 0 {
			r.finalizing = false
			r.finMu.Unlock()
			return
		}
		r.finMu.Unlock()
		errs := finalizeTogether(r.ctx, r.finalizer, group)
		for i, g := range group {
			g.err = g.finish(r.ctx, errs[i])
			r.ended(g)
		}
		r.finMu.Lock()
	}
}

// handle is one handler goroutine: it works rows in hand, one at a time,
// until stop, or until ctx ends (then the rows it would take are skipped).
func (r *run[K, R]) handle() {
	for {
		select {
		case <-r.quit:
			return
		case <-r.ctx.Done():
			return
		case it := <-r.work:
			if r.ctx.Err() == nil {
				it.b.work(r.ctx, it.i)
			}
			r.done(it)
		}
	}
}

// done takes a row out of the hand: worked, or skipped and left pending for
// its batch to release.
func (r *run[K, R]) done(it item[K, R]) {
	r.mu.Lock()
	r.inHand--
	if it.b.rowDone() {
		r.ending++ // in the same step, so no claim sees the room without it
	}
	r.mu.Unlock()
	r.signalRoom()
}

type rowState int

const (
	rowPending  rowState = iota // claimed, handler not started
	rowRunning                  // handler running
	rowDecided                  // outcome waiting to be finalized
	rowFinished                 // finalized (or its finalize failed), released, or dropped
	rowLost                     // a renewal found it taken by another worker
)

// batch is one claimed batch at work. mu guards the row states and the
// lease; storeMu keeps renewals and finalizes from overlapping, so a
// renewal never sees a row whose finalize is in flight.
type batch[K comparable, R any] struct {
	w    *Worker[K, R]
	log  *slog.Logger
	lock LockID
	rows []Claimed[K, R]

	storeMu sync.Mutex

	mu         sync.Mutex
	state      []rowState
	cancel     []context.CancelCauseFunc // of running handlers
	finals     []Final[K]
	kinds      []Kind // the finals' outcomes, for the hooks; nil without hooks
	pending    []int  // rows decided, not yet finalized
	decided    chan struct{}
	errs       []error
	validUntil time.Time // local trust in the lease, monotonic
	expired    bool
	watchdog   *time.Timer
	left       int           // rows not yet worked or skipped
	worked     chan struct{} // closed when left reaches 0

	stopKeeping context.CancelFunc
	keeperDone  chan struct{}
	ended       chan struct{} // closed when end has returned; err is then set
	err         error
}

// begin starts the batch's lease watchdog and keeper.
func (b *batch[K, R]) begin(ctx context.Context) {
	b.mu.Lock()
	b.watchdog = time.AfterFunc(time.Until(b.validUntil), b.expire)
	b.mu.Unlock()
	keepCtx, stopKeeping := context.WithCancel(ctx)
	b.stopKeeping = stopKeeping
	b.keeperDone = make(chan struct{})
	go func() {
		defer close(b.keeperDone)
		b.keep(keepCtx)
	}()
}

// work runs row i's handler and decides its outcome, unless the row must
// not be worked (lost, or the lease has run out).
func (b *batch[K, R]) work(ctx context.Context, i int) {
	rctx, ok := b.start(ctx, i)
	if !ok {
		return
	}
	out, interrupted := b.call(rctx, i)
	b.decide(i, out, interrupted)
}

// rowDone counts a row as worked or skipped; true for the batch's last.
func (b *batch[K, R]) rowDone() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.left--
	if b.left == 0 {
		close(b.worked)
		return true
	}
	return false
}

// end runs once every row is worked or skipped: it stops the keeper,
// finalizes the outcomes left and releases the rows never started.
func (b *batch[K, R]) end(ctx context.Context) error {
	b.stopKeeper()
	return b.finish(ctx, b.flush(ctx))
}

// finish ends a batch whose last flush returned flushErr: it releases the
// rows never started and returns every error the batch met.
func (b *batch[K, R]) finish(ctx context.Context, flushErr error) error {
	if flushErr != nil {
		b.addErr(flushErr)
	}
	if err := b.releaseUnstarted(ctx); err != nil {
		b.addErr(err)
	}
	return b.joinedErrs()
}

// stopKeeper stops the keeper and the lease watchdog: from then on only
// the batch's end touches the store for it.
func (b *batch[K, R]) stopKeeper() {
	b.stopKeeping()
	<-b.keeperDone
	b.mu.Lock()
	b.watchdog.Stop()
	b.mu.Unlock()
}

func (b *batch[K, R]) joinedErrs() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return errors.Join(b.errs...)
}

func (b *batch[K, R]) addErr(err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.errs = append(b.errs, err)
}

// keep is the batch's background goroutine: it renews the lease every
// RenewEvery and finalizes decided rows once the first of them has waited
// FlushInterval, while the handlers go on. The batch stops it before its
// last flush.
func (b *batch[K, R]) keep(ctx context.Context) {
	cfg := &b.w.cfg
	renew := time.NewTicker(cfg.RenewEvery)
	defer renew.Stop()
	var flushTimer *time.Timer
	var flushC <-chan time.Time
	defer func() {
		if flushTimer != nil {
			flushTimer.Stop()
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return
		case <-renew.C:
			b.renew(ctx)
		case <-b.decided:
			if flushC == nil {
				flushTimer = time.NewTimer(cfg.FlushInterval)
				flushC = flushTimer.C
			}
		case <-flushC:
			flushC = nil
			if err := b.flush(ctx); err != nil {
				b.addErr(err)
			}
		}
	}
}

// start marks row i running and returns its handler's context, or false
// when the row must not be worked (lost, or the lease has run out).
func (b *batch[K, R]) start(ctx context.Context, i int) (context.Context, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.state[i] != rowPending || b.expired {
		return nil, false
	}
	b.state[i] = rowRunning
	rctx, cancel := context.WithCancelCause(ctx)
	b.cancel[i] = cancel
	return rctx, true
}

// call runs the handler; a panic is a failure. interrupted reports whether
// the handler's context ended while it ran (shutdown, lease, loss).
func (b *batch[K, R]) call(rctx context.Context, i int) (out Outcome, interrupted bool) {
	cfg := &b.w.cfg
	row := b.rows[i]
	defer func() {
		if v := recover(); v != nil {
			perr := &PanicError{Value: v, Stack: debug.Stack()}
			b.log.Error("baton: work row handler panicked", "id", row.ID, "panic", v, "stack", string(perr.Stack))
			out = Fail(perr)
		}
		interrupted = rctx.Err() != nil
		b.mu.Lock()
		b.cancel[i](nil)
		b.cancel[i] = nil
		b.mu.Unlock()
	}()
	if cfg.MaxAttempts > 0 {
		if a := cfg.Attempt(row.Row); a > cfg.MaxAttempts {
			return Park(fmt.Errorf("%w: claimed for attempt %d of %d", ErrAttemptsExhausted, a, cfg.MaxAttempts)), false
		}
	}
	return cfg.Handler(rctx, row), false
}

// decide turns row i's outcome into its Final, to be flushed.
func (b *batch[K, R]) decide(i int, out Outcome, interrupted bool) {
	cfg := &b.w.cfg
	row := b.rows[i]
	now := time.Now()

	b.mu.Lock()
	lost := b.state[i] == rowLost
	b.mu.Unlock()
	if lost {
		b.log.Warn("baton: work row was taken by another worker while at work; its outcome is dropped",
			"id", row.ID, "outcome", out.kind.String())
		return
	}

	kind, err := out.kind, out.err
	if kind == kindNone {
		kind, err = KindFail, ErrNoOutcome
	}
	if kind == KindPark && cfg.OnPark == nil {
		kind = KindFail
	}
	if kind == KindFail && interrupted {
		// The attempt was cut short by this worker (shutdown or lease),
		// not by the row: hand it back rather than count a failure.
		kind = KindRelease
	}
	attempt := cfg.Attempt(row.Row)
	if kind == KindFail && cfg.MaxAttempts > 0 && attempt >= cfg.MaxAttempts {
		kind = KindPark
	}

	f := Final[K]{ID: row.ID}
	switch kind {
	case KindComplete:
		f.Set = mergeSets(cfg.OnComplete(now), out.set)
	case KindFail:
		var base []Set
		if cfg.OnFail != nil {
			base = cfg.OnFail(now, err)
		}
		f.Set = mergeSets(base, out.set)
		delay := cfg.Backoff.Delay(attempt, out.retryAfter)
		f.VisibleAfter = now.Add(delay)
		b.log.Info("baton: work row attempt failed", "id", row.ID, "attempt", attempt, "retry_in", delay, "err", err)
	case KindPark:
		f.Set = mergeSets(cfg.OnPark(now, err), out.set)
		b.log.Warn("baton: work row parked", "id", row.ID, "attempt", attempt, "err", err)
	case KindRelease:
	}

	b.mu.Lock()
	defer b.mu.Unlock()
	if b.state[i] == rowLost {
		return
	}
	b.state[i] = rowDecided
	b.finals[i] = f
	if b.kinds != nil {
		b.kinds[i] = kind
	}
	b.pending = append(b.pending, i)
	select {
	case b.decided <- struct{}{}:
	default:
	}
}

// mergeSets is base then extra, where extra wins for a column both set.
func mergeSets(base, extra []Set) []Set {
	if len(extra) == 0 {
		return base
	}
	out := make([]Set, 0, len(base)+len(extra))
	for _, s := range base {
		overridden := false
		for _, e := range extra {
			overridden = overridden || e.column == s.column
		}
		if !overridden {
			out = append(out, s)
		}
	}
	return append(out, extra...)
}

// flush finalizes every decided row in one store call.
func (b *batch[K, R]) flush(ctx context.Context) error {
	b.storeMu.Lock()
	defer b.storeMu.Unlock()

	idx, finals := b.takePending()
	if len(finals) == 0 {
		return nil
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), b.w.cfg.StoreTimeout)
	defer cancel()
	began := time.Now()
	owned, err := b.w.cfg.Store.FinalizeMany(sctx, b.lock, finals)
	if err == nil && len(owned) != len(finals) {
		err = fmt.Errorf("the store answered %d results for %d rows", len(owned), len(finals))
	}
	return b.flushed(ctx, idx, finals, owned, began, err)
}

// takePending takes the decided rows' finals, marking them finished.
func (b *batch[K, R]) takePending() ([]int, []Final[K]) {
	b.mu.Lock()
	defer b.mu.Unlock()
	idx := b.pending
	b.pending = nil
	finals := make([]Final[K], len(idx))
	for j, i := range idx {
		finals[j] = b.finals[i]
		b.state[i] = rowFinished
	}
	return idx, finals
}

// flushed reports a finalize of the batch's rows idx: to the hooks, to the
// log, and as the batch's error.
func (b *batch[K, R]) flushed(ctx context.Context, idx []int, finals []Final[K], owned []bool, began time.Time, err error) error {
	b.finalized(ctx, idx, owned, began, err)
	if err != nil {
		b.log.Error("baton: finalizing work rows failed; they become claimable when their lease ends", "rows", len(finals), "err", err)
		return fmt.Errorf("baton/workrow: finalize %d rows: %w", len(finals), err)
	}
	for j, ok := range owned {
		if !ok {
			b.log.Warn("baton: work row was taken by another worker before its outcome was recorded; nothing was overwritten",
				"id", finals[j].ID)
		}
	}
	return nil
}

// finalizeTogether finalizes the decided rows of batches whose keepers
// have stopped in one FinalizeClaims call, and returns each batch's
// finalize error.
func finalizeTogether[K comparable, R any](ctx context.Context, f ClaimsFinalizer[K], group []*batch[K, R]) []error {
	errs := make([]error, len(group))
	idx := make([][]int, len(group))
	claims := make([]ClaimFinals[K], 0, len(group))
	parts := make([]int, 0, len(group)) // group index of each claim
	for i, b := range group {
		var finals []Final[K]
		idx[i], finals = b.takePending()
		if len(finals) > 0 {
			claims = append(claims, ClaimFinals[K]{Lock: b.lock, Finals: finals})
			parts = append(parts, i)
		}
	}
	if len(claims) == 0 {
		return errs
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), group[0].w.cfg.StoreTimeout)
	defer cancel()
	began := time.Now()
	owned, err := f.FinalizeClaims(sctx, claims)
	if err == nil && len(owned) != len(claims) {
		err = fmt.Errorf("the store answered %d results for %d claims", len(owned), len(claims))
	}
	for c, i := range parts {
		var o []bool
		cerr := err
		if cerr == nil {
			if o = owned[c]; len(o) != len(claims[c].Finals) {
				cerr = fmt.Errorf("the store answered %d results for %d rows", len(o), len(claims[c].Finals))
			}
		}
		errs[i] = group[i].flushed(ctx, idx[i], claims[c].Finals, o, began, cerr)
	}
	return errs
}

// releaseUnstarted hands back the rows whose handler never ran.
func (b *batch[K, R]) releaseUnstarted(ctx context.Context) error {
	b.mu.Lock()
	var ids []K
	for i, s := range b.state {
		if s == rowPending {
			ids = append(ids, b.rows[i].ID)
			b.state[i] = rowFinished
		}
	}
	b.mu.Unlock()
	if len(ids) == 0 {
		return nil
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), b.w.cfg.StoreTimeout)
	defer cancel()
	began := time.Now()
	owned, err := b.w.cfg.Store.ReleaseMany(sctx, b.lock, ids)
	b.finalized(ctx, nil, owned, began, err)
	if err != nil {
		b.log.Warn("baton: releasing unworked rows failed; they become claimable when their lease ends", "rows", len(ids), "err", err)
		return fmt.Errorf("baton/workrow: release %d rows: %w", len(ids), err)
	}
	b.log.Debug("baton: released unworked rows", "rows", len(ids))
	return nil
}

// expire runs when the local trust in the lease ends: the running handlers
// are cancelled and no further row is started.
func (b *batch[K, R]) expire() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.expired || time.Now().Before(b.validUntil) {
		return // a renewal moved the end after this timer fired
	}
	b.expired = true
	for i, cancel := range b.cancel {
		if cancel != nil {
			cancel(ErrLeaseExpired)
			b.log.Warn("baton: work row lease ran out before a renewal succeeded; its handler is cancelled", "id", b.rows[i].ID)
		}
	}
}

// renew extends the lease of every row still held.
func (b *batch[K, R]) renew(ctx context.Context) {
	cfg := &b.w.cfg
	b.storeMu.Lock()
	defer b.storeMu.Unlock()

	b.mu.Lock()
	var idx []int
	var ids []K
	for i, s := range b.state {
		if s == rowPending || s == rowRunning || s == rowDecided {
			idx = append(idx, i)
			ids = append(ids, b.rows[i].ID)
		}
	}
	b.mu.Unlock()
	if len(ids) == 0 {
		return
	}

	start := time.Now()
	sctx, cancel := context.WithTimeout(ctx, cfg.StoreTimeout)
	owned, err := cfg.Store.RenewMany(sctx, b.lock, start.Add(cfg.Lease), ids)
	cancel()
	if err == nil && len(owned) != len(ids) {
		err = fmt.Errorf("the store answered %d results for %d rows", len(owned), len(ids))
	}
	b.renewed(ctx, owned, start, err)
	if err != nil {
		if ctx.Err() == nil {
			b.log.Warn("baton: renewing work rows failed; the batch stops when its lease runs out", "rows", len(ids), "err", err)
		}
		return
	}

	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.expired {
		b.validUntil = start.Add(cfg.Lease)
		b.watchdog.Reset(time.Until(b.validUntil))
	}
	for j, ok := range owned {
		i := idx[j]
		if ok || b.state[i] == rowFinished || b.state[i] == rowLost {
			continue
		}
		if b.state[i] == rowDecided {
			b.pending = removeIndex(b.pending, i)
		}
		b.state[i] = rowLost
		if c := b.cancel[i]; c != nil {
			c(ErrNotOwned)
		}
		b.log.Warn("baton: work row was taken by another worker; dropping it", "id", b.rows[i].ID)
	}
}

func removeIndex(list []int, v int) []int {
	for j, x := range list {
		if x == v {
			return append(list[:j], list[j+1:]...)
		}
	}
	return list
}
