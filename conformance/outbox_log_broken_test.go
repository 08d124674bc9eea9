package conformance_test

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/baton-go/baton/backends/memory"
	"github.com/baton-go/baton/conformance"
	"github.com/baton-go/baton/core/outbox"
)

// The reference log (memory.OutboxLog) and its broken variants, one or
// more per rule of outbox.LogStore and outbox.LogReader.

func outboxLogHarness(st *memory.OutboxStore) conformance.OutboxLogHarness {
	log := st.Log()
	return conformance.OutboxLogHarness{Log: log, Store: st, Producer: memoryProducer(st), Lose: func(*testing.T) { log.Lose() }}
}

var outboxLogFeatures = conformance.OutboxLogFeatures{VisibilityWait: 2 * time.Second}

func TestRunOutboxLog_PassesTheMemoryLog(t *testing.T) {
	skipInChild(t)
	conformance.RunOutboxLog(t, func(t *testing.T) conformance.OutboxLogHarness {
		st, err := memory.NewOutboxStore(memory.OutboxStoreOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return outboxLogHarness(st)
	}, outboxLogFeatures)
}

// outboxLogVariant is the memory log with one rule broken.
type outboxLogVariant struct {
	variant
	harness func(st *memory.OutboxStore) conformance.OutboxLogHarness
}

// logWrap is the reference harness with the log store replaced.
func logWrap(wrap func(*memory.OutboxStore, *memory.OutboxLog) outbox.LogStore) func(*memory.OutboxStore) conformance.OutboxLogHarness {
	return func(st *memory.OutboxStore) conformance.OutboxLogHarness {
		h := outboxLogHarness(st)
		h.Log = wrap(st, h.Log.(*memory.OutboxLog))
		return h
	}
}

// readerWrap is the reference harness whose readers are wrapped.
func readerWrap(wrap func(st *memory.OutboxStore, r outbox.LogReader) outbox.LogReader) func(*memory.OutboxStore) conformance.OutboxLogHarness {
	return logWrap(func(st *memory.OutboxStore, l *memory.OutboxLog) outbox.LogStore {
		return openWrap{l, func(r outbox.LogReader) outbox.LogReader { return wrap(st, r) }}
	})
}

// openWrap wraps the readers its log opens.
type openWrap struct {
	*memory.OutboxLog
	wrap func(outbox.LogReader) outbox.LogReader
}

func (o openWrap) Open(ctx context.Context, token uint64) (outbox.LogReader, error) {
	r, err := o.OutboxLog.Open(ctx, token)
	if err != nil {
		return nil, err
	}
	return o.wrap(r), nil
}

// readFunc is a reader whose Read is replaced.
type readFunc struct {
	outbox.LogReader
	read func(ctx context.Context, after outbox.LogPosition, limit int, wait time.Duration) (outbox.LogBatch, error)
}

func (r readFunc) Read(ctx context.Context, after outbox.LogPosition, limit int, wait time.Duration) (outbox.LogBatch, error) {
	return r.read(ctx, after, limit, wait)
}

// readAll reads everything the inner reader has after after.
func readAll(ctx context.Context, r outbox.LogReader, after outbox.LogPosition, wait time.Duration) (outbox.LogBatch, error) {
	return r.Read(ctx, after, 1<<20, wait)
}

var outboxLogVariants = []outboxLogVariant{
	{variant{"log-in-xid-order", "R1", "TransactionsComeInCommitOrder"},
		readerWrap(func(_ *memory.OutboxStore, r outbox.LogReader) outbox.LogReader {
			return readFunc{r, func(ctx context.Context, after outbox.LogPosition, limit int, wait time.Duration) (outbox.LogBatch, error) {
				b, err := r.Read(ctx, after, limit, wait)
				slices.SortStableFunc(b.Entries, func(x, y outbox.LogEntry) int { return cmp.Compare(x.XID, y.XID) })
				return b, err
			}}
		})},
	{variant{"transaction-in-id-order", "R2", "EntriesOfOneTransactionComeTogetherInWrittenOrder"},
		readerWrap(func(_ *memory.OutboxStore, r outbox.LogReader) outbox.LogReader {
			return readFunc{r, func(ctx context.Context, after outbox.LogPosition, limit int, wait time.Duration) (outbox.LogBatch, error) {
				b, err := r.Read(ctx, after, limit, wait)
				// Each transaction's entries in id order, at the positions
				// they came at.
				for start := 0; start < len(b.Entries); {
					end := start + 1
					for end < len(b.Entries) && b.Entries[end].XID == b.Entries[start].XID {
						end++
					}
					group := b.Entries[start:end]
					pos := make([]outbox.LogPosition, len(group))
					for i, e := range group {
						pos[i] = e.Pos
					}
					slices.SortFunc(group, func(x, y outbox.LogEntry) int { return x.ID.Compare(y.ID) })
					for i := range group {
						group[i].Pos = pos[i]
					}
					start = end
				}
				return b, err
			}}
		})},
	{variant{"log-rollback-commits", "R3", "RolledBackEntriesNeverComeOut"},
		func(st *memory.OutboxStore) conformance.OutboxLogHarness {
			h := outboxLogHarness(st)
			h.Producer = txWrap(st, func(tx *memory.OutboxTx) conformance.OutboxTx { return rollbackCommits{tx} })
			return h
		}},
	{variant{"log-pinned-by-open-transactions", "R4", "OpenTransactionHoldsNothingBack"},
		func(st *memory.OutboxStore) conformance.OutboxLogHarness {
			h := outboxLogHarness(st)
			log := h.Log.(*memory.OutboxLog)
			h.Log = openWrap{log, func(r outbox.LogReader) outbox.LogReader {
				return readFunc{r, func(ctx context.Context, after outbox.LogPosition, limit int, wait time.Duration) (outbox.LogBatch, error) {
					b, err := r.Read(ctx, after, limit, wait)
					m, _ := log.Mark(ctx)
					b.Entries = slices.DeleteFunc(b.Entries, func(e outbox.LogEntry) bool { return e.XID >= m.XID })
					return b, err
				}}
			}}
			return h
		}},
	{variant{"read-includes-after", "R5", "ReadHonoursAfterAndLimit"},
		readerWrap(func(_ *memory.OutboxStore, r outbox.LogReader) outbox.LogReader {
			return readFunc{r, func(ctx context.Context, after outbox.LogPosition, limit int, wait time.Duration) (outbox.LogBatch, error) {
				b, err := readAll(ctx, r, outbox.LogPosition{}, wait)
				es := slices.DeleteFunc(b.Entries, func(e outbox.LogEntry) bool { return e.Pos.Compare(after) < 0 })
				if len(es) > limit {
					return outbox.LogBatch{Entries: es[:limit], Reached: es[limit-1].Pos}, err
				}
				if b.Reached.Compare(after) < 0 {
					b.Reached = after
				}
				return outbox.LogBatch{Entries: es, Reached: b.Reached}, err
			}}
		})},
	{variant{"resume-restarts-the-transaction", "R6", "ReadingAfterAnEntryGoesOnInsideItsTransaction"},
		readerWrap(func(_ *memory.OutboxStore, r outbox.LogReader) outbox.LogReader {
			return readFunc{r, func(ctx context.Context, after outbox.LogPosition, limit int, wait time.Duration) (outbox.LogBatch, error) {
				if after.Seq > 0 {
					after.Seq = 0 // back to the transaction's start
				}
				return r.Read(ctx, after, limit, wait)
			}}
		})},
	{variant{"reached-the-end-when-cut", "R7", "NothingComesOutAtOrBelowReached"},
		readerWrap(func(_ *memory.OutboxStore, r outbox.LogReader) outbox.LogReader {
			return readFunc{r, func(ctx context.Context, after outbox.LogPosition, limit int, wait time.Duration) (outbox.LogBatch, error) {
				all, err := readAll(ctx, r, after, wait)
				b := all
				b.Entries = all.Entries[:min(limit, len(all.Entries))]
				return b, err // Reached: the end, past the entries cut off
			}}
		})},
	{variant{"start-forgets-the-confirmed-position", "R8", "ANewReaderStartsAtTheConfirmedPosition"},
		readerWrap(func(_ *memory.OutboxStore, r outbox.LogReader) outbox.LogReader { return zeroStart{r} })},
	{variant{"open-with-a-lower-token-wins", "R9", "OpenEndsTheReaderOfAnEarlierTerm"},
		logWrap(func(st *memory.OutboxStore, l *memory.OutboxLog) outbox.LogStore { return lowerTokenWins{l, st} })},
	{variant{"settle-log-blind", "R10", "SettleLogIsCompareAndSet"},
		logWrap(func(st *memory.OutboxStore, l *memory.OutboxLog) outbox.LogStore { return settleLogBlind{l, st} })},
	{variant{"backward-log-settle-ignored", "R11", "LogPositionNeverGoesBackwards"},
		logWrap(func(st *memory.OutboxStore, l *memory.OutboxLog) outbox.LogStore { return backwardLogIgnored{l} })},
	{variant{"settle-log-parks-nothing", "R12", "SettleLogParksIntoTheDeadLetters"},
		logWrap(func(st *memory.OutboxStore, l *memory.OutboxLog) outbox.LogStore { return parkNothing{l} })},
	{variant{"settle-log-nil-keeps-the-key", "R13", "SettleLogWritesTheState"},
		logWrap(func(st *memory.OutboxStore, l *memory.OutboxLog) outbox.LogStore { return logNilKeeps{l} })},
	{variant{"mark-xid-is-the-next-xid", "R14", "MarkBoundsEndedTransactionsAndCommittedEntries"},
		logWrap(func(st *memory.OutboxStore, l *memory.OutboxLog) outbox.LogStore { return markNextXID{l, st} })},
	{variant{"lost-log-without-the-sentinel", "R15", "ALostLogIsRecognisable"},
		readerWrap(func(_ *memory.OutboxStore, r outbox.LogReader) outbox.LogReader {
			return readFunc{r, func(ctx context.Context, after outbox.LogPosition, limit int, wait time.Duration) (outbox.LogBatch, error) {
				b, err := r.Read(ctx, after, limit, wait)
				if errors.Is(err, outbox.ErrLogLost) {
					err = errors.New("the slot is gone")
				}
				return b, err
			}}
		})},
	{variant{"read-accepts-limit-zero", "R16", "InvalidReadArgumentsAreErrors"},
		readerWrap(func(_ *memory.OutboxStore, r outbox.LogReader) outbox.LogReader {
			return readFunc{r, func(ctx context.Context, after outbox.LogPosition, limit int, wait time.Duration) (outbox.LogBatch, error) {
				return r.Read(ctx, after, max(limit, 1), max(wait, 0))
			}}
		})},
	{variant{"log-cancel-loses-the-cause", "R17", "LogCancelledContextIsRecognisable"},
		logWrap(func(st *memory.OutboxStore, l *memory.OutboxLog) outbox.LogStore { return logCauseLost{l} })},
	{variant{"log-drops-the-trace-context", "R18", "LogEntriesCarryTheirTraceContext"},
		readerWrap(func(_ *memory.OutboxStore, r outbox.LogReader) outbox.LogReader {
			return readFunc{r, func(ctx context.Context, after outbox.LogPosition, limit int, wait time.Duration) (outbox.LogBatch, error) {
				b, err := r.Read(ctx, after, limit, wait)
				for i := range b.Entries {
					b.Entries[i].TraceContext = outbox.TraceContext{}
				}
				return b, err
			}}
		})},
	{variant{"read-ignores-the-byte-budget", "R19", "ReadStopsAtTheByteBudget"},
		readerWrap(func(_ *memory.OutboxStore, r outbox.LogReader) outbox.LogReader { return readPastBudget{r} })},
	{variant{"settle-log-refuses-a-used-id", "R20", "AParkReplacesTheDeadLetterOfItsID"},
		logWrap(func(st *memory.OutboxStore, l *memory.OutboxLog) outbox.LogStore { return usedIDRefused{l, st} })},
	{variant{"walk-settle-refuses-a-used-id", "R20", "AParkReplacesTheDeadLetterOfItsID"},
		func(st *memory.OutboxStore) conformance.OutboxLogHarness {
			h := outboxLogHarness(st)
			h.Store = walkUsedIDRefused{st}
			return h
		}},
}

// readPastBudget reads on until the limit, as a reader that counts entries
// only would: one pass could then hold BatchSize payloads of any size.
type readPastBudget struct{ outbox.LogReader }

func (r readPastBudget) Read(ctx context.Context, after outbox.LogPosition, limit int, wait time.Duration) (outbox.LogBatch, error) {
	b, err := r.LogReader.Read(ctx, after, limit, wait)
	for err == nil && len(b.Entries) > 0 && len(b.Entries) < limit {
		more, merr := r.LogReader.Read(ctx, b.Reached, limit-len(b.Entries), 0)
		if merr != nil || len(more.Entries) == 0 {
			break
		}
		b.Entries, b.Reached = append(b.Entries, more.Entries...), more.Reached
	}
	return b, err
}

// zeroStart forgets the confirmed position: every reader starts at zero.
type zeroStart struct{ outbox.LogReader }

func (zeroStart) Start() outbox.LogPosition { return outbox.LogPosition{} }

// lowerTokenWins opens with the latest token recorded when its own is
// lower: an earlier term ends the reader of a later one.
type lowerTokenWins struct {
	*memory.OutboxLog
	st *memory.OutboxStore
}

func (l lowerTokenWins) Open(ctx context.Context, token uint64) (outbox.LogReader, error) {
	if state, err := l.st.State(ctx); err == nil {
		token = max(token, outbox.ReadLogReaderToken(state))
	}
	return l.OutboxLog.Open(ctx, token)
}

// settleLogBlind settles from whatever position is stored.
type settleLogBlind struct {
	*memory.OutboxLog
	st *memory.OutboxStore
}

func (b settleLogBlind) SettleLog(ctx context.Context, s outbox.LogSettlement) error {
	state, err := b.st.State(ctx)
	if err != nil {
		return err
	}
	if s.From, err = outbox.LogPositionFromState(state); err != nil {
		return err
	}
	if s.To.Compare(s.From) < 0 {
		s.To = s.From
	}
	return b.OutboxLog.SettleLog(ctx, s)
}

// backwardLogIgnored answers a backward settlement with success.
type backwardLogIgnored struct{ *memory.OutboxLog }

func (b backwardLogIgnored) SettleLog(ctx context.Context, s outbox.LogSettlement) error {
	if s.To.Compare(s.From) < 0 {
		return nil
	}
	return b.OutboxLog.SettleLog(ctx, s)
}

// parkNothing settles without parking.
type parkNothing struct{ *memory.OutboxLog }

func (p parkNothing) SettleLog(ctx context.Context, s outbox.LogSettlement) error {
	s.Park = nil
	return p.OutboxLog.SettleLog(ctx, s)
}

// usedIDRefused refuses to park an entry whose id has a dead letter, as
// a park that inserts only ids not parked before does.
type usedIDRefused struct {
	*memory.OutboxLog
	st *memory.OutboxStore
}

func (u usedIDRefused) SettleLog(ctx context.Context, s outbox.LogSettlement) error {
	if err := parkedBefore(ctx, u.st, s.Park); err != nil {
		return err
	}
	return u.OutboxLog.SettleLog(ctx, s)
}

// walkUsedIDRefused is usedIDRefused for the walk's Settle.
type walkUsedIDRefused struct{ *memory.OutboxStore }

func (w walkUsedIDRefused) Settle(ctx context.Context, s outbox.Settlement) error {
	if err := parkedBefore(ctx, w.OutboxStore, s.Park); err != nil {
		return err
	}
	return w.OutboxStore.Settle(ctx, s)
}

// parkedBefore is an error naming the first of park whose id has a dead
// letter.
func parkedBefore(ctx context.Context, st *memory.OutboxStore, park []outbox.Parked) error {
	for _, p := range park {
		if _, err := st.GetDead(ctx, p.Entry.ID); err == nil {
			return errors.New("entry " + p.Entry.ID.String() + " was parked before")
		}
	}
	return nil
}

// logNilKeeps ignores nil state values.
type logNilKeeps struct{ *memory.OutboxLog }

func (l logNilKeeps) SettleLog(ctx context.Context, s outbox.LogSettlement) error {
	kept := map[string]*string{}
	for k, v := range s.State {
		if v != nil {
			kept[k] = v
		}
	}
	s.State = kept
	return l.OutboxLog.SettleLog(ctx, s)
}

// markNextXID marks with the next xid, open transactions or not.
type markNextXID struct {
	*memory.OutboxLog
	st *memory.OutboxStore
}

func (m markNextXID) Mark(ctx context.Context) (outbox.LogMark, error) {
	mk, err := m.OutboxLog.Mark(ctx)
	if err != nil {
		return mk, err
	}
	mk.XID, err = m.st.NextXID(ctx)
	return mk, err
}

// logCauseLost replaces context errors with its own.
type logCauseLost struct{ *memory.OutboxLog }

func (l logCauseLost) Mark(ctx context.Context) (outbox.LogMark, error) {
	mk, err := l.OutboxLog.Mark(ctx)
	if err != nil {
		err = errors.New("mark failed")
	}
	return mk, err
}

func outboxLogBroken() brokenSuite {
	return newBrokenSuite("RunOutboxLog", "TestBrokenOutboxLogChild", "BATON_CONFORMANCE_BROKEN_OUTBOX_LOG", outboxLogVariants)
}

func TestRunOutboxLog_FailsEveryBrokenStore(t *testing.T) { outboxLogBroken().run(t) }

// TestBrokenOutboxLogChild runs the suite against the variant its parent
// names, and is expected to fail.
func TestBrokenOutboxLogChild(t *testing.T) {
	v := chosen(t, outboxLogBroken().env, outboxLogVariants)
	conformance.RunOutboxLog(t, func(t *testing.T) conformance.OutboxLogHarness {
		st, err := memory.NewOutboxStore(memory.OutboxStoreOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return v.harness(st)
	}, outboxLogFeatures)
}
