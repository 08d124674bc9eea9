package outbox

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// feed is where a leader's passes read entries and settle them: the walk
// of the table (walkFeed), or the log (logFeed, which walks the table
// itself while it takes over from the walk). A pass is the same for both:
// the feed only knows positions.
type feed interface {
	// load takes the feed's position from the stored state: at the start
	// of a term, and again after a settlement failed (the stored position
	// is the truth).
	load(ctx context.Context, st map[string]string) error
	// scan reads the next batch after the feed's position. An error that
	// waiting cannot mend wraps errRefused.
	scan(ctx context.Context, limit int) ([]Entry, error)
	// settle stores the outcome of the last batch: its first n entries
	// settled, or all of it with all (which may settle further than its
	// last entry, see LogBatch.Reached). ErrCursorMoved means another
	// leader settled meanwhile.
	settle(ctx context.Context, n int, all bool, park []Parked, state map[string]*string) error
	// idleDelay is the pause after a batch that was not full: the walk
	// sleeps, the log has waited in scan already.
	idleDelay(configured time.Duration) time.Duration
	// close ends the term's hold on the source.
	close(ctx context.Context)
}

// errRefused marks a scan error that waiting cannot mend: the pass raises
// the stuck notice at once.
var errRefused = errors.New("refused")

// refused wraps err so that errors.Is(err, errRefused) holds while the
// text stays err's.
type refusal struct{ err error }

func (r refusal) Error() string   { return r.err.Error() }
func (r refusal) Unwrap() []error { return []error{r.err, errRefused} }

func refused(err error) error  { return refusal{err} }
func isRefused(err error) bool { return errors.Is(err, errRefused) }

// walkFeed is the (xid, id) walk of the table: Store.Scan from the cursor,
// Store.Settle by compare-and-set of the cursor.
type walkFeed struct {
	s   Store
	cur Cursor
	// back is set in walk mode: state a logical driver settled last is
	// taken back (fromLog) before walking.
	back bool
	// checkCounter asks the next scan to compare the cursor with the
	// transaction counter: after loading it, and whenever the walk has
	// caught up (a restore in between would leave it ahead for good).
	checkCounter bool
	// counterEvery bounds how often a caught-up walk compares: a walk
	// woken at every commit catches up at every pass (0: every time).
	counterEvery time.Duration
	counterAt    time.Time
	batch        []Entry
	limit        int

	// timeout bounds each call to s (Config.StoreTimeout).
	timeout time.Duration

	// readAhead is set in walk mode over a ConcurrentScanner: while a full
	// batch is delivered and settled, the next one is read (ahead), so a
	// busy walk does not wait for its scans one after the other.
	// settledAll says the last settlement took all of its batch: after a
	// pass that stopped early (a retry) the next one is not read ahead,
	// since a retry that repeats would drop it every time.
	readAhead  bool
	settledAll bool
	ahead      *nextBatch
}

// nextBatch is a scan read ahead from the cursor a settlement moves to.
// Scanning writes nothing, so a batch read ahead that turns out unwanted
// (the settlement failed, the term ended) is just dropped.
type nextBatch struct {
	from    Cursor
	limit   int
	cancel  context.CancelFunc
	done    chan struct{} // closed when entries and err are set
	entries []Entry
	err     error
}

// readNext starts reading the batch after from, on a goroutine that drop
// or take waits for. It runs under ctx, the context of the pass that
// started it, so a hook sees it as part of that pass.
func (w *walkFeed) readNext(ctx context.Context, from Cursor, limit int) {
	ctx, cancel := context.WithCancel(ctx)
	a := &nextBatch{from: from, limit: limit, cancel: cancel, done: make(chan struct{})}
	go func() { // owned: take or drop waits for it
		defer close(a.done)
		defer func() {
			// On the driver's goroutine a panicking Scan would unwind
			// through Run; here it would end the process.
			if p := recover(); p != nil {
				a.entries, a.err = nil, fmt.Errorf("the store's Scan panicked: %v", p)
			}
		}()
		a.entries, a.err = withinValue(ctx, w.timeout, func(ctx context.Context) ([]Entry, error) { return w.s.Scan(ctx, from, limit) })
	}()
	w.ahead = a
}

// take returns the batch read ahead, with its error, when there is one
// from the cursor with this limit: it is the scan the pass would have
// sent. One from elsewhere (a pass that settled less than its batch did
// not move the cursor to its start) is dropped.
func (w *walkFeed) take(limit int) (entries []Entry, taken bool, err error) {
	a := w.ahead
	if a == nil {
		return nil, false, nil
	}
	w.ahead = nil
	<-a.done
	a.cancel()
	if a.from != w.cur || a.limit != limit {
		return nil, false, nil
	}
	return a.entries, true, a.err
}

// drop ends a read ahead that will not be used, and waits for it.
func (w *walkFeed) drop() {
	if a := w.ahead; a != nil {
		w.ahead = nil
		a.cancel()
		<-a.done
	}
}

func (w *walkFeed) load(ctx context.Context, st map[string]string) error {
	cur, err := CursorFromState(st)
	if err != nil {
		return err
	}
	if w.back && st[KeySource] == SourceLogical {
		if cur, err = fromLog(ctx, w.s, w.timeout, st); err != nil {
			return err
		}
	}
	w.drop()
	w.cur, w.checkCounter, w.batch = cur, true, nil
	return nil
}

func (w *walkFeed) scan(ctx context.Context, limit int) ([]Entry, error) {
	w.batch = nil
	if w.checkCounter {
		next, err := withinValue(ctx, w.timeout, w.s.NextXID)
		switch {
		case err != nil:
			return nil, fmt.Errorf("reading the transaction counter: %w", err)
		case w.cur.XID >= next:
			// Waiting cannot mend it: notify at once, and check again
			// next pass, in case an operator repaired it meanwhile.
			return nil, refused(fmt.Errorf("%w: the cursor is at xid %d and the next xid of this database is %d; it was restored logically (pg_dump/pg_restore) from another cluster, and entries written since would never be delivered; repair it with `baton outbox rebase` (see docs/outbox.md, Logical restore)",
				ErrCursorAhead, w.cur.XID, next))
		}
		w.checkCounter, w.counterAt = false, time.Now()
	}
	entries, taken, err := w.take(limit)
	if !taken {
		entries, err = withinValue(ctx, w.timeout, func(ctx context.Context) ([]Entry, error) { return w.s.Scan(ctx, w.cur, limit) })
	}
	if err != nil {
		return nil, fmt.Errorf("scan: %w", err)
	}
	w.batch, w.limit = entries, limit
	if w.readAhead && w.settledAll && len(entries) > 0 && (len(entries) == limit || !ScanHasRoom(ScanBytes(entries))) {
		// A full batch: more is likely waiting, so the next pass's scan
		// runs while this batch is delivered and settled. It starts from
		// the batch's end, where the cursor is once all of it settles;
		// if less settles, the batch read ahead is dropped.
		w.readNext(ctx, entries[len(entries)-1].Cursor(), limit)
	}
	return entries, nil
}

func (w *walkFeed) settle(ctx context.Context, n int, all bool, park []Parked, state map[string]*string) error {
	if all {
		n = len(w.batch)
	}
	to := w.cur
	if n > 0 {
		to = w.batch[n-1].Cursor()
	}
	settlement := Settlement{From: w.cur, To: to, Park: park, State: state}
	if err := within(ctx, w.timeout, func(ctx context.Context) error { return w.s.Settle(ctx, settlement) }); err != nil {
		w.drop()
		return err
	}
	w.cur, w.settledAll = to, all
	if all {
		w.checkCounter = len(w.batch) < w.limit && time.Since(w.counterAt) >= w.counterEvery
	}
	return nil
}

func (w *walkFeed) idleDelay(d time.Duration) time.Duration { return d }

func (w *walkFeed) close(context.Context) { w.drop() }

// caughtUp reports whether the last settled batch was all of what lay
// below the horizon: not full, and settled whole.
func (w *walkFeed) caughtUp(all bool) bool { return all && len(w.batch) < w.limit }

// fromLog takes back state a logical driver settled last, for the walk:
// it moves the walk's cursor to SettledCursor (compare-and-set from the
// stored cursor) and records the walk as the source. Entries of
// transactions whose xid is at or above the last passed mark's and that
// committed before the logical driver's last settlement are delivered
// again (docs/outbox.md, "Switching sources"). timeout bounds the
// settlement (Config.StoreTimeout).
func fromLog(ctx context.Context, s Store, timeout time.Duration, st map[string]string) (Cursor, error) {
	cur, err := CursorFromState(st)
	if err != nil {
		return Cursor{}, err
	}
	to, err := SettledCursor(st)
	if err != nil {
		return Cursor{}, err
	}
	back := Settlement{From: cur, To: to, State: map[string]*string{KeySource: ptr(SourceWalk)}}
	if err := within(ctx, timeout, func(ctx context.Context) error { return s.Settle(ctx, back) }); err != nil {
		return Cursor{}, fmt.Errorf("taking the outbox back from the logical source: %w", err)
	}
	return to, nil
}
