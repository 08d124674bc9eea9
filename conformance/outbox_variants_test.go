package conformance_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/baton-go/baton/backends/memory"
	"github.com/baton-go/baton/core/outbox"
)

// The store-side variants of outboxVariants, each the memory outbox store
// with one rule broken.

// settleBlindly settles from whatever cursor is stored, not the one the
// pass began at: a read-then-write with no compare-and-set.
type settleBlindly struct{ *memory.OutboxStore }

func (b settleBlindly) Settle(ctx context.Context, s outbox.Settlement) error {
	st, err := b.State(ctx)
	if err != nil {
		return err
	}
	if s.From, err = outbox.CursorFromState(st); err != nil {
		return err
	}
	return b.OutboxStore.Settle(ctx, s)
}

// requeueInPlace puts a dead letter back under its own id and records
// nothing.
type requeueInPlace struct{ *memory.OutboxStore }

func (b requeueInPlace) Requeue(ctx context.Context, id, _ outbox.ID) error {
	d, err := b.GetDead(ctx, id)
	if err != nil {
		return err
	}
	tx, err := b.Begin(ctx)
	if err != nil {
		return err
	}
	if err := tx.Enqueue(ctx, id, d.Lane, d.Payload); err != nil {
		_ = tx.Rollback(ctx)
		return err
	}
	return tx.Commit(ctx)
}

// scanInclusive scans from the cursor's own entry on (>= instead of >).
type scanInclusive struct{ *memory.OutboxStore }

func (b scanInclusive) Scan(ctx context.Context, after outbox.Cursor, limit int) ([]outbox.Entry, error) {
	if limit < 1 {
		return b.OutboxStore.Scan(ctx, after, limit)
	}
	all, err := b.OutboxStore.Scan(ctx, outbox.Cursor{}, math.MaxInt32)
	if err != nil {
		return nil, err
	}
	all = slices.DeleteFunc(all, func(e outbox.Entry) bool { return e.Cursor().Compare(after) < 0 })
	return all[:min(limit, len(all))], nil
}

// deleteEverything deletes delivered entries without regard to the cursor.
type deleteEverything struct{ *memory.OutboxStore }

func (b deleteEverything) DeleteDelivered(ctx context.Context, _ outbox.Cursor, window time.Duration, limit int) (int, error) {
	top := outbox.Cursor{XID: math.MaxUint64}
	for i := range top.ID {
		top.ID[i] = 0xff
	}
	return b.OutboxStore.DeleteDelivered(ctx, top, window, limit)
}

// cleanText stores what it was given after dropping NUL bytes and invalid
// UTF-8, rather than refusing: the caller never learns its text changed.
type cleanText struct{ *memory.OutboxStore }

func (b cleanText) Settle(ctx context.Context, s outbox.Settlement) error {
	clean := func(v string) string { return strings.ReplaceAll(strings.ToValidUTF8(v, ""), "\x00", "") }
	park := make([]outbox.Parked, len(s.Park))
	for i, p := range s.Park {
		park[i] = outbox.Parked{Entry: p.Entry, Reason: clean(p.Reason)}
	}
	state := make(map[string]*string, len(s.State))
	for k, v := range s.State {
		if v != nil {
			c := clean(*v)
			v = &c
		}
		state[clean(k)] = v
	}
	s.Park, s.State = park, state
	return b.OutboxStore.Settle(ctx, s)
}

// cutReasons keeps at most 255 bytes of a reason or state value, as a
// varchar(255) column would.
type cutReasons struct{ *memory.OutboxStore }

func (b cutReasons) Settle(ctx context.Context, s outbox.Settlement) error {
	cut := func(v string) string {
		if len(v) > 255 {
			return strings.ToValidUTF8(v[:255], "")
		}
		return v
	}
	park := make([]outbox.Parked, len(s.Park))
	for i, p := range s.Park {
		park[i] = outbox.Parked{Entry: p.Entry, Reason: cut(p.Reason)}
	}
	state := make(map[string]*string, len(s.State))
	for k, v := range s.State {
		if v != nil {
			c := cut(*v)
			v = &c
		}
		state[k] = v
	}
	s.Park, s.State = park, state
	return b.OutboxStore.Settle(ctx, s)
}

// lastXID reports the last xid handed out instead of the next: the xid of
// the newest entry, which a cursor can legitimately hold.
type lastXID struct{ *memory.OutboxStore }

func (b lastXID) NextXID(ctx context.Context) (uint64, error) {
	n, err := b.OutboxStore.NextXID(ctx)
	return n - 1, err
}

// settleByXID compares only the xids of the stored cursor and From.
type settleByXID struct{ *memory.OutboxStore }

func (b settleByXID) Settle(ctx context.Context, s outbox.Settlement) error {
	if stored, err := storedCursor(ctx, b.OutboxStore); err == nil && stored.XID == s.From.XID {
		s.From = stored
	}
	return b.OutboxStore.Settle(ctx, s)
}

func storedCursor(ctx context.Context, st outbox.Store) (outbox.Cursor, error) {
	state, err := st.State(ctx)
	if err != nil {
		return outbox.Cursor{}, err
	}
	return outbox.CursorFromState(state)
}

// settleFromAhead lets a settlement from a cursor ahead of the stored one
// through, as a check "the cursor only moves forward" would.
type settleFromAhead struct{ *memory.OutboxStore }

func (b settleFromAhead) Settle(ctx context.Context, s outbox.Settlement) error {
	if stored, err := storedCursor(ctx, b.OutboxStore); err == nil && s.From.Compare(stored) > 0 {
		s.From = stored
	}
	return b.OutboxStore.Settle(ctx, s)
}

// backwardStandsStill answers a settlement that moves the cursor back by
// leaving it where it is, and reports success.
type backwardStandsStill struct{ *memory.OutboxStore }

func (b backwardStandsStill) Settle(ctx context.Context, s outbox.Settlement) error {
	if s.To.Compare(s.From) < 0 {
		s.To = s.From
	}
	return b.OutboxStore.Settle(ctx, s)
}

// checkThenSettle compares the stored cursor with From, then writes
// without comparing again. The rendezvous makes two concurrent settlements
// both compare before either writes, so both win.
type checkThenSettle struct {
	*memory.OutboxStore
	meet rendezvous
}

func (b *checkThenSettle) Settle(ctx context.Context, s outbox.Settlement) error {
	stored, err := storedCursor(ctx, b.OutboxStore)
	if err != nil {
		return err
	}
	b.meet.meet(nil)
	if stored != s.From {
		return b.OutboxStore.Settle(ctx, s) // refused, as it should be
	}
	if s.From, err = storedCursor(ctx, b.OutboxStore); err != nil {
		return err
	}
	return b.OutboxStore.Settle(ctx, s)
}

// noDeadPayload keeps no payload with a dead letter.
type noDeadPayload struct{ *memory.OutboxStore }

func (b noDeadPayload) GetDead(ctx context.Context, id outbox.ID) (outbox.DeadLetter, error) {
	d, err := b.OutboxStore.GetDead(ctx, id)
	d.Payload = nil
	return d, err
}

// deadWithoutTrace reads dead letters without their trace contexts, as a
// store whose dead-letter table lacks the column would.
type deadWithoutTrace struct{ *memory.OutboxStore }

func (b deadWithoutTrace) GetDead(ctx context.Context, id outbox.ID) (outbox.DeadLetter, error) {
	d, err := b.OutboxStore.GetDead(ctx, id)
	d.TraceContext = outbox.TraceContext{}
	return d, err
}

func (b deadWithoutTrace) ListDead(ctx context.Context, opts outbox.ListOptions) ([]outbox.DeadLetter, error) {
	ds, err := b.OutboxStore.ListDead(ctx, opts)
	for i := range ds {
		ds[i].TraceContext = outbox.TraceContext{}
	}
	return ds, err
}

// parkWhatIsThere parks the entries it finds between the cursors and
// drops the rest of the list without a word.
type parkWhatIsThere struct{ *memory.OutboxStore }

func (b parkWhatIsThere) Settle(ctx context.Context, s outbox.Settlement) error {
	if s.To.Compare(s.From) >= 0 {
		scanned, err := b.Scan(ctx, s.From, math.MaxInt32)
		if err != nil {
			return err
		}
		s.Park = slices.DeleteFunc(slices.Clone(s.Park), func(p outbox.Parked) bool {
			return !slices.ContainsFunc(scanned, func(e outbox.Entry) bool { return e.ID == p.Entry.ID && e.Cursor().Compare(s.To) <= 0 })
		})
	}
	return b.OutboxStore.Settle(ctx, s)
}

// nilKeepsKey ignores the keys a settlement removes.
type nilKeepsKey struct{ *memory.OutboxStore }

func (b nilKeepsKey) Settle(ctx context.Context, s outbox.Settlement) error {
	state := make(map[string]*string, len(s.State))
	for k, v := range s.State {
		if v != nil {
			state[k] = v
		}
	}
	s.State = state
	return b.OutboxStore.Settle(ctx, s)
}

// oldestFirst lists dead letters oldest parked first.
type oldestFirst struct{ *memory.OutboxStore }

func (b oldestFirst) ListDead(ctx context.Context, opts outbox.ListOptions) ([]outbox.DeadLetter, error) {
	all, err := b.OutboxStore.ListDead(ctx, outbox.ListOptions{Limit: outbox.MaxListLimit})
	if err != nil {
		return nil, err
	}
	if _, err := b.OutboxStore.ListDead(ctx, opts); err != nil {
		return nil, err // the same refusals
	}
	slices.Reverse(all)
	if !opts.Before.IsNil() {
		i := slices.IndexFunc(all, func(d outbox.DeadLetter) bool { return d.ID == opts.Before })
		all = all[i+1:]
	}
	limit := opts.Limit
	if limit == 0 {
		limit = outbox.DefaultListLimit
	}
	return all[:min(limit, len(all))], nil
}

// plainNotFound reports an unknown dead letter with an error of its own.
type plainNotFound struct{ *memory.OutboxStore }

func hideNotFound(err error) error {
	if errors.Is(err, outbox.ErrNotFound) {
		return fmt.Errorf("no such row: %v", err)
	}
	return err
}

func (b plainNotFound) GetDead(ctx context.Context, id outbox.ID) (outbox.DeadLetter, error) {
	d, err := b.OutboxStore.GetDead(ctx, id)
	return d, hideNotFound(err)
}

func (b plainNotFound) Requeue(ctx context.Context, id, newID outbox.ID) error {
	return hideNotFound(b.OutboxStore.Requeue(ctx, id, newID))
}

// requeueAgain answers a second requeue with success, doing nothing.
type requeueAgain struct{ *memory.OutboxStore }

func (b requeueAgain) Requeue(ctx context.Context, id, newID outbox.ID) error {
	if err := b.OutboxStore.Requeue(ctx, id, newID); !errors.Is(err, outbox.ErrAlreadyRequeued) {
		return err
	}
	return nil
}

// requeueRefusalHidden answers a requeue refused for its new id with
// success, doing nothing.
type requeueRefusalHidden struct{ *memory.OutboxStore }

func (b requeueRefusalHidden) Requeue(ctx context.Context, id, newID outbox.ID) error {
	err := b.OutboxStore.Requeue(ctx, id, newID)
	if err != nil && !errors.Is(err, outbox.ErrNotFound) && !errors.Is(err, outbox.ErrAlreadyRequeued) {
		return nil
	}
	return err
}

// bulkByID requeues a batch's dead letters one by one in id order, each in
// a transaction of its own: the replay loses the walk's (xid, id) order.
type bulkByID struct{ *memory.OutboxStore }

func (b bulkByID) RequeueBatch(ctx context.Context, rb outbox.RequeueBatch) (outbox.RequeueBatchResult, error) {
	dry := rb
	dry.DryRun = true
	res, err := b.OutboxStore.RequeueBatch(ctx, dry)
	if err != nil || rb.DryRun {
		return res, err
	}
	slices.SortFunc(res.Requeued, func(x, y outbox.Requeued) int { return x.ID.Compare(y.ID) })
	for i := range res.Requeued {
		res.Requeued[i].RequeuedAs = outbox.NewID()
		if err := b.Requeue(ctx, res.Requeued[i].ID, res.Requeued[i].RequeuedAs); err != nil {
			return res, err
		}
	}
	return res, nil
}

// bulkAllOrNothing fails the whole batch when it takes a dead letter that
// was requeued before.
type bulkAllOrNothing struct{ *memory.OutboxStore }

func (b bulkAllOrNothing) RequeueBatch(ctx context.Context, rb outbox.RequeueBatch) (outbox.RequeueBatchResult, error) {
	dry := rb
	dry.DryRun = true
	if res, err := b.OutboxStore.RequeueBatch(ctx, dry); err != nil || res.AlreadyRequeued > 0 {
		return outbox.RequeueBatchResult{}, errors.Join(err, outbox.ErrAlreadyRequeued)
	}
	return b.OutboxStore.RequeueBatch(ctx, rb)
}

// noWindow deletes whatever is due, however recent.
type noWindow struct{ *memory.OutboxStore }

func (b noWindow) DeleteDelivered(ctx context.Context, upTo outbox.Cursor, window time.Duration, limit int) (int, error) {
	if window > 0 {
		window = 0
	}
	return b.OutboxStore.DeleteDelivered(ctx, upTo, window, limit)
}

func (b noWindow) DeleteRequeued(ctx context.Context, window time.Duration, limit int) (int, error) {
	if window > 0 {
		window = 0
	}
	return b.OutboxStore.DeleteRequeued(ctx, window, limit)
}

// zeroLimitScan answers a scan with a limit below 1 with nothing, instead
// of refusing it.
type zeroLimitScan struct{ *memory.OutboxStore }

func (b zeroLimitScan) Scan(ctx context.Context, after outbox.Cursor, limit int) ([]outbox.Entry, error) {
	if limit < 1 {
		return nil, nil
	}
	return b.OutboxStore.Scan(ctx, after, limit)
}

// outboxCauseLost fails on an ended context with an error of its own.
type outboxCauseLost struct{ *memory.OutboxStore }

func (b outboxCauseLost) Scan(ctx context.Context, after outbox.Cursor, limit int) ([]outbox.Entry, error) {
	if ctx.Err() != nil {
		return nil, errAborted
	}
	return b.OutboxStore.Scan(ctx, after, limit)
}

func (b outboxCauseLost) Settle(ctx context.Context, s outbox.Settlement) error {
	if ctx.Err() != nil {
		return errAborted
	}
	return b.OutboxStore.Settle(ctx, s)
}

// scanPastBudget reads on until the limit, as a store that counts entries
// only would: one pass could then hold BatchSize payloads of any size.
type scanPastBudget struct{ *memory.OutboxStore }

func (b scanPastBudget) Scan(ctx context.Context, after outbox.Cursor, limit int) ([]outbox.Entry, error) {
	var out []outbox.Entry
	for len(out) < limit {
		page, err := b.OutboxStore.Scan(ctx, after, limit-len(out))
		if err != nil {
			return nil, err
		}
		if len(page) == 0 {
			break
		}
		out = append(out, page...)
		after = page[len(page)-1].Cursor()
	}
	return out, nil
}
