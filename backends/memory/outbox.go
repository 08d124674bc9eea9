package memory

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/baton-go/baton/core/outbox"
)

// ErrTxDone is returned by an OutboxTx used after its Commit or Rollback.
var ErrTxDone = errors.New("baton/memory: the outbox transaction is already committed or rolled back")

// firstXID is the first transaction id the store hands out. It is above
// 2^32, as PostgreSQL's 64-bit xid8 is once the 32-bit counter has wrapped,
// so code that squeezes an xid into 32 bits fails against this store too.
const firstXID uint64 = 1<<32 + 1

// OutboxStoreOptions configure an OutboxStore. The zero value uses the
// defaults.
type OutboxStoreOptions struct {
	// Now is the store's clock: entries' created_at and dead letters'
	// parked_at come from it, and the retention windows are measured by
	// it. nil means time.Now.
	Now func() time.Time
}

// OutboxStore is an outbox.Store kept in memory, with the producer side
// that PostgreSQL's own transactions provide there: Begin, then Enqueue,
// Commit or Rollback on the OutboxTx. Create it with NewOutboxStore. It is
// safe for concurrent use.
//
// It keeps PostgreSQL's visibility rules, because the walk depends on them:
// a transaction takes its xid at its first Enqueue, not at Begin, its
// entries appear at Commit, and Scan reads only below the horizon, the
// smallest xid of a transaction still open. So an entry is never walked
// past while an older transaction may still commit before it.
type OutboxStore struct {
	now func() time.Time

	mu      sync.Mutex
	nextXID uint64
	// open holds the xids of transactions that have written and not yet
	// ended; the smallest is the horizon.
	open map[uint64]struct{}
	// pending maps the ids enqueued by open transactions to their
	// transaction, so two transactions cannot write the same id.
	pending map[outbox.ID]*OutboxTx
	// entries are the committed entries in (xid, id) order; ids holds
	// their ids, the outbox's primary key.
	entries []outbox.Entry
	ids     map[outbox.ID]struct{}
	dead    map[outbox.ID]*outbox.DeadLetter
	state   map[string]string
	// log is what the logical source reads: see outbox_log.go.
	log commitLog
	// bus holds the listeners (Listen) that commits signal.
	bus bus
}

var _ outbox.Store = (*OutboxStore)(nil)

// withDefaults returns a copy of o with its zero fields set to the
// defaults.
func (o OutboxStoreOptions) withDefaults() OutboxStoreOptions {
	if o.Now == nil {
		o.Now = time.Now
	}
	return o
}

// NewOutboxStore returns an empty store. Every option is valid, so the error is
// always nil; it is there so that every constructor reads the same.
func NewOutboxStore(opts OutboxStoreOptions) (*OutboxStore, error) {
	opts = opts.withDefaults()
	return &OutboxStore{
		now:     opts.Now,
		nextXID: firstXID,
		open:    make(map[uint64]struct{}),
		pending: make(map[outbox.ID]*OutboxTx),
		ids:     make(map[outbox.ID]struct{}),
		dead:    make(map[outbox.ID]*outbox.DeadLetter),
		state:   make(map[string]string),
	}, nil
}

// clock reads the store's clock without the monotonic reading: stored
// times are wall-clock times, as in a database column.
func (s *OutboxStore) clock() time.Time { return s.now().Round(0) }

// OutboxTx is a producer's transaction on an OutboxStore: what the
// caller's own database transaction is for the PostgreSQL adapter. It is
// not meant for concurrent use, though nothing breaks if it is.
type OutboxTx struct {
	s       *OutboxStore
	xid     uint64 // 0 until the first Enqueue
	entries []outbox.Entry
	done    bool
}

// Begin starts a producer transaction. It takes no xid yet, so an open
// transaction that has not written holds nothing back.
func (s *OutboxStore) Begin(ctx context.Context) (*OutboxTx, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return &OutboxTx{s: s}, nil
}

// XID is the transaction's xid: 0 until its first Enqueue, which takes the
// next one. Its entries walk in this order, whenever it commits.
func (tx *OutboxTx) XID() uint64 {
	tx.s.mu.Lock()
	defer tx.s.mu.Unlock()
	return tx.xid
}

// Enqueue writes an entry in the transaction, visible to Scan once the
// transaction commits, with the trace context ctx carries
// (outbox.WithTraceContext). An invalid entry (outbox.ValidateEntry), an
// invalid trace context (outbox.TraceContextFrom) or an id that the outbox
// or an open transaction already holds is rejected and nothing is written;
// the transaction stays usable.
func (tx *OutboxTx) Enqueue(ctx context.Context, id outbox.ID, lane string, payload []byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s := tx.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if tx.done {
		return ErrTxDone
	}
	if err := outbox.ValidateEntry(id, lane, payload); err != nil {
		return err
	}
	tc, err := outbox.TraceContextFrom(ctx)
	if err != nil {
		return err
	}
	if _, ok := s.dead[id]; ok {
		return fmt.Errorf("baton/memory: enqueue %s: a dead letter has it: %w; use a fresh id (outbox.NewID)", id, outbox.ErrIDInUse)
	}
	if _, ok := s.ids[id]; ok {
		return fmt.Errorf("baton/memory: enqueue %s: an entry in the outbox has it: %w; use a fresh id (outbox.NewID)", id, outbox.ErrIDInUse)
	}
	switch owner := s.pending[id]; {
	case owner == tx:
		return fmt.Errorf("baton/memory: enqueue %s: already enqueued in this transaction: %w", id, outbox.ErrIDInUse)
	case owner != nil:
		return fmt.Errorf("baton/memory: enqueue %s: already enqueued by another open transaction: %w", id, outbox.ErrIDInUse)
	}
	if tx.xid == 0 {
		tx.xid = s.nextXID
		s.nextXID++
		s.open[tx.xid] = struct{}{}
	}
	tx.entries = append(tx.entries, outbox.Entry{
		XID:          tx.xid,
		ID:           id,
		Lane:         lane,
		Payload:      slices.Clone(payload),
		CreatedAt:    s.clock(),
		TraceContext: tc,
	})
	s.pending[id] = tx
	return nil
}

// Commit makes the transaction's entries visible to Scan, in (xid, id)
// order among the others. With ctx already ended it rolls back instead and
// returns ctx's error, as a database commit that never got sent would.
func (tx *OutboxTx) Commit(ctx context.Context) error {
	s := tx.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if tx.done {
		return ErrTxDone
	}
	if err := ctx.Err(); err != nil {
		tx.end()
		return fmt.Errorf("baton/memory: commit: rolled back: %w", err)
	}
	entries := tx.entries
	tx.end()
	if len(entries) == 0 {
		return nil
	}
	s.log.commit(entries) // in the order written, before the walk's sort
	slices.SortFunc(entries, func(a, b outbox.Entry) int { return a.ID.Compare(b.ID) })
	s.insert(entries)
	s.bus.signal(entries[0].XID)
	return nil
}

// Rollback discards the transaction's entries.
func (tx *OutboxTx) Rollback(ctx context.Context) error {
	s := tx.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if tx.done {
		return ErrTxDone
	}
	tx.end()
	return nil
}

// end closes the transaction and releases its xid and ids; the caller
// holds the store's mutex.
func (tx *OutboxTx) end() {
	s := tx.s
	tx.done = true
	for _, e := range tx.entries {
		delete(s.pending, e.ID)
	}
	if tx.xid != 0 {
		delete(s.open, tx.xid)
	}
	tx.entries = nil
}

// insert adds committed entries that share one xid, sorted by id; the
// caller holds the mutex. No committed entry has that xid yet, so they go
// in one piece before the first entry with a larger xid.
func (s *OutboxStore) insert(entries []outbox.Entry) {
	xid := entries[0].XID
	at := sort.Search(len(s.entries), func(i int) bool { return s.entries[i].XID > xid })
	s.entries = slices.Insert(s.entries, at, entries...)
	for _, e := range entries {
		s.ids[e.ID] = struct{}{}
	}
}

// horizon is the smallest xid of an open transaction that has written, or
// 0 when there is none; the caller holds the mutex.
func (s *OutboxStore) horizon() uint64 {
	var h uint64
	for x := range s.open {
		if h == 0 || x < h {
			h = x
		}
	}
	return h
}

// after is the index of the first entry strictly after c; the caller holds
// the mutex.
func (s *OutboxStore) after(c outbox.Cursor) int {
	i, found := slices.BinarySearchFunc(s.entries, c, func(e outbox.Entry, c outbox.Cursor) int { return e.Cursor().Compare(c) })
	if found {
		i++
	}
	return i
}

// ScansConcurrently implements outbox.ConcurrentScanner: every method
// holds the store's mutex, so a Scan may run while a Settle does.
func (s *OutboxStore) ScansConcurrently() bool { return true }

// Scan implements outbox.Store.
func (s *OutboxStore) Scan(ctx context.Context, after outbox.Cursor, limit int) ([]outbox.Entry, error) {
	if limit < 1 {
		return nil, fmt.Errorf("baton/memory: scan: limit is %d; it must be at least 1", limit)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	h := s.horizon()
	var out []outbox.Entry
	size := 0
	for _, e := range s.entries[s.after(after):] {
		if len(out) == limit || !outbox.ScanHasRoom(size) || (h != 0 && e.XID >= h) {
			break
		}
		e.Payload = slices.Clone(e.Payload)
		out = append(out, e)
		size += len(e.Payload)
	}
	return out, nil
}

// Settle implements outbox.Store. Everything is checked before anything
// changes, so a refused settlement writes nothing.
func (s *OutboxStore) Settle(ctx context.Context, st outbox.Settlement) error {
	if err := outbox.ValidateSettlement(st); err != nil {
		return fmt.Errorf("baton/memory: settle: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	stored, err := outbox.CursorFromState(s.state)
	if err != nil {
		return fmt.Errorf("baton/memory: settle: %w", err)
	}
	if stored != st.From {
		return fmt.Errorf("%w: the stored cursor is %s, the pass began at %s", outbox.ErrCursorMoved, fmtCursor(stored), fmtCursor(st.From))
	}
	parking := make(map[outbox.ID]string, len(st.Park))
	for _, p := range st.Park {
		id := p.Entry.ID
		if _, twice := parking[id]; twice {
			return fmt.Errorf("baton/memory: settle: entry %s is parked twice", id)
		}
		parking[id] = p.Reason
	}
	// Parking copies: the entry stays in the outbox, below the cursor like
	// a delivered one, until retention, so its id is never free while its
	// dead letter is being written (see the PostgreSQL adapter).
	var parked []outbox.Entry
	for _, e := range s.entries[s.after(st.From):s.after(st.To)] {
		if _, ok := parking[e.ID]; ok {
			parked = append(parked, e)
		}
	}
	if len(parked) != len(parking) {
		return fmt.Errorf("baton/memory: settle: %d of the %d entries to park are in the outbox between the two cursors; a parked entry must be one the pass scanned, once; nothing was written",
			len(parked), len(parking))
	}
	now := s.clock()
	for _, e := range parked {
		s.park(e, parking[e.ID], now)
	}
	for k, v := range st.State {
		if v == nil {
			delete(s.state, k)
		} else {
			s.state[k] = *v
		}
	}
	s.state[outbox.KeyLastScannedXID], s.state[outbox.KeyLastScannedID] = outbox.CursorState(st.To)
	return nil
}

// park copies e to the dead letters, for both sources. An id that has a
// dead letter already can only come from a write that bypassed Enqueue (or,
// on the log, a park repeated); the newer entry replaces it rather than
// fail every settlement (see outbox.Store.Settle and outbox.LogStore's
// R20). The caller holds the mutex.
func (s *OutboxStore) park(e outbox.Entry, reason string, now time.Time) {
	s.dead[e.ID] = deadLetter(e, reason, now)
}

// deadLetter is the dead letter of e, parked now for reason: a copy of
// everything the entry carries.
func deadLetter(e outbox.Entry, reason string, now time.Time) *outbox.DeadLetter {
	return &outbox.DeadLetter{ID: e.ID, XID: e.XID, Lane: e.Lane, Payload: slices.Clone(e.Payload),
		Error: reason, ParkedAt: now, TraceContext: e.TraceContext}
}

// requeued is the entry a requeue makes of d, under id and xid.
func requeued(d *outbox.DeadLetter, id outbox.ID, xid uint64, now time.Time) outbox.Entry {
	return outbox.Entry{XID: xid, ID: id, Lane: d.Lane, Payload: slices.Clone(d.Payload), CreatedAt: now, TraceContext: d.TraceContext}
}

func fmtCursor(c outbox.Cursor) string { return fmt.Sprintf("(%d, %s)", c.XID, c.ID) }

// State implements outbox.Store.
func (s *OutboxStore) State(ctx context.Context) (map[string]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.state), nil
}

// NextXID implements outbox.Store: the xid the next writing transaction
// (or requeue) takes.
func (s *OutboxStore) NextXID(ctx context.Context) (uint64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.nextXID, nil
}

// deadOrder is the listing order: newest parked first, then by id.
func deadOrder(a, b *outbox.DeadLetter) int {
	if c := b.ParkedAt.Compare(a.ParkedAt); c != 0 {
		return c
	}
	return a.ID.Compare(b.ID)
}

// ListDead implements outbox.Store. A Before that names no dead letter is
// an error wrapping outbox.ErrNotFound, rather than an empty page that
// would look like the end of the listing.
func (s *OutboxStore) ListDead(ctx context.Context, opts outbox.ListOptions) ([]outbox.DeadLetter, error) {
	limit, err := opts.PageLimit()
	if err != nil {
		return nil, fmt.Errorf("baton/memory: list dead letters: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	all := slices.SortedFunc(maps.Values(s.dead), deadOrder)
	if !opts.Before.IsNil() {
		b, ok := s.dead[opts.Before]
		if !ok {
			return nil, fmt.Errorf("%w: the listing continues before %s, which is not a dead letter", outbox.ErrNotFound, opts.Before)
		}
		i, _ := slices.BinarySearchFunc(all, b, deadOrder)
		all = all[i+1:]
	}
	out := make([]outbox.DeadLetter, 0, min(limit, len(all)))
	for _, d := range all[:min(limit, len(all))] {
		c := *d
		c.Payload = nil
		out = append(out, c)
	}
	return out, nil
}

// GetDead implements outbox.Store.
func (s *OutboxStore) GetDead(ctx context.Context, id outbox.ID) (outbox.DeadLetter, error) {
	if err := ctx.Err(); err != nil {
		return outbox.DeadLetter{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	d, ok := s.dead[id]
	if !ok {
		return outbox.DeadLetter{}, fmt.Errorf("%w: %s", outbox.ErrNotFound, id)
	}
	c := *d
	c.Payload = slices.Clone(d.Payload)
	return c, nil
}

// Requeue implements outbox.Store. The new entry takes the next xid, as if
// a transaction of its own committed it, so it walks after everything
// written before. newID must be an id no entry, open transaction or dead
// letter has: reusing a dead letter's id would make parking the new entry
// collide with it.
func (s *OutboxStore) Requeue(ctx context.Context, id, newID outbox.ID) error {
	if newID.IsNil() {
		return fmt.Errorf("%w: requeue: the new id is the nil UUID; use outbox.NewID()", outbox.ErrInvalidEntry)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	d, ok := s.dead[id]
	if !ok {
		return fmt.Errorf("%w: %s", outbox.ErrNotFound, id)
	}
	if !d.RequeuedAs.IsNil() {
		return fmt.Errorf("%w: %s was requeued as %s", outbox.ErrAlreadyRequeued, id, d.RequeuedAs)
	}
	_, inOutbox := s.ids[newID]
	_, inTx := s.pending[newID]
	_, isDead := s.dead[newID]
	if inOutbox || inTx || isDead {
		return fmt.Errorf("baton/memory: requeue %s: the new id %s is already used by an entry or a dead letter", id, newID)
	}
	xid := s.nextXID
	s.nextXID++
	again := []outbox.Entry{requeued(d, newID, xid, s.clock())}
	s.log.commit(again)
	s.insert(again)
	d.RequeuedAs, d.RequeuedAt = newID, s.clock()
	return nil
}

// RequeueBatch implements outbox.Store. The batch's new entries share the
// next xid, as if one transaction of their own committed them, and take
// fresh ids in the order of their dead letters, so they walk in it.
func (s *OutboxStore) RequeueBatch(ctx context.Context, b outbox.RequeueBatch) (outbox.RequeueBatchResult, error) {
	var res outbox.RequeueBatchResult
	if err := outbox.CheckRequeueBatch(b); err != nil {
		return res, fmt.Errorf("baton/memory requeue batch: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return res, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var taken []*outbox.DeadLetter
	for _, d := range s.dead {
		if b.Filter.Matches(*d) && (outbox.Cursor{XID: d.XID, ID: d.ID}).Compare(b.After) > 0 {
			taken = append(taken, d)
		}
	}
	slices.SortFunc(taken, func(x, y *outbox.DeadLetter) int {
		return outbox.Cursor{XID: x.XID, ID: x.ID}.Compare(outbox.Cursor{XID: y.XID, ID: y.ID})
	})
	taken = taken[:min(b.Limit, len(taken))]
	if len(taken) == 0 {
		return res, nil
	}
	res.Taken = len(taken)
	last := taken[len(taken)-1]
	res.Last = outbox.Cursor{XID: last.XID, ID: last.ID}
	xid := s.nextXID
	var entries []outbox.Entry
	now := s.clock()
	for _, d := range taken {
		if !d.RequeuedAs.IsNil() {
			res.AlreadyRequeued++
			continue
		}
		r := outbox.Requeued{ID: d.ID, XID: d.XID}
		if !b.DryRun {
			r.RequeuedAs = outbox.NewID()
			entries = append(entries, requeued(d, r.RequeuedAs, xid, now))
			d.RequeuedAs, d.RequeuedAt = r.RequeuedAs, now
		}
		res.Requeued = append(res.Requeued, r)
	}
	if len(entries) > 0 {
		s.nextXID++
		s.log.commit(entries)
		s.insert(entries)
	}
	return res, nil
}

func checkRetention(op string, window time.Duration, limit int) error {
	if err := outbox.CheckRetention(window, limit); err != nil {
		return fmt.Errorf("baton/memory %s: %w", op, err)
	}
	return nil
}

// DeleteDelivered implements outbox.Store, oldest (lowest in the walk)
// first.
func (s *OutboxStore) DeleteDelivered(ctx context.Context, upTo outbox.Cursor, window time.Duration, limit int) (int, error) {
	if err := checkRetention("delete delivered", window, limit); err != nil {
		return 0, err
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	cutoff := s.clock().Add(-window)
	n := 0
	s.entries = slices.DeleteFunc(s.entries, func(e outbox.Entry) bool {
		if n == limit || !e.CreatedAt.Before(cutoff) || e.Cursor().Compare(upTo) > 0 {
			return false
		}
		n++
		delete(s.ids, e.ID)
		return true
	})
	return n, nil
}

// DeleteRequeued implements outbox.Store, oldest requeued first.
func (s *OutboxStore) DeleteRequeued(ctx context.Context, window time.Duration, limit int) (int, error) {
	if err := checkRetention("delete requeued", window, limit); err != nil {
		return 0, err
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	cutoff := s.clock().Add(-window)
	var due []*outbox.DeadLetter
	for _, d := range s.dead {
		if !d.RequeuedAs.IsNil() && d.RequeuedAt.Before(cutoff) {
			due = append(due, d)
		}
	}
	slices.SortFunc(due, func(a, b *outbox.DeadLetter) int {
		if c := a.RequeuedAt.Compare(b.RequeuedAt); c != 0 {
			return c
		}
		return a.ID.Compare(b.ID)
	})
	due = due[:min(limit, len(due))]
	for _, d := range due {
		delete(s.dead, d.ID)
	}
	return len(due), nil
}
