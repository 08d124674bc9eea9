package outbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"strconv"
	"time"
)

// logMarkEvery bounds how often a logical leader reads a LogMark: once the
// settled position has passed the previous mark, and at most once per
// logMarkEvery. It bounds how far retention, and a driver going back to
// the walk, lag behind the settled position.
const logMarkEvery = time.Second

// logFeed reads the log (Config.Log). When the stored state is the walk's
// (a deployment switching from the walk, or a log that begins after the
// settled position), it first walks the table until everything the log
// will not deliver has been walked, then switches in one settlement:
//
//  1. Open the reader; its Start S is where the log resumes. Entries
//     committed after S will come from the log.
//  2. Read a mark M. Every transaction whose xid is below M.XID has ended,
//     so every entry committed before S has an xid below M.XID.
//  3. Walk until a pass that began after M has settled a partial batch
//     whole: the walk has then delivered every committed entry below the
//     horizon, which is at or above M.XID.
//  4. Settle the switch: the log position S, the walk's cursor W (the log
//     skips entries at or below W, which were walked), and M.XID as the
//     settled xid (retention may delete every row below it).
//
// Nothing is lost and nothing is delivered twice: every entry at or below
// W was walked, every other one is committed after S or not at all.
type logFeed struct {
	ls     LogStore
	s      Store
	token  uint64
	wait   time.Duration // Read's wait for entries: Config.IdleDelay
	logger *slog.Logger

	// timeout bounds each store call (Config.StoreTimeout); a Read's is
	// wait plus timeout.
	timeout time.Duration

	r LogReader

	// walk is the walk while the feed takes over from it; nil once the
	// log is the source.
	walk       *walkFeed
	switchMark LogMark

	pos    LogPosition
	walked Cursor // entries at or below it were walked; the log skips them

	mark    LogMark // the last mark taken and not yet passed, when hasMark
	hasMark bool
	markAt  time.Time

	batch LogBatch
	kept  []LogEntry // batch.Entries above walked: what the pass was given
}

func (f *logFeed) load(ctx context.Context, st map[string]string) error {
	f.batch, f.kept = LogBatch{}, nil
	if f.r == nil {
		r, err := withinValue(ctx, f.timeout, func(ctx context.Context) (LogReader, error) { return f.ls.Open(ctx, f.token) })
		if err != nil {
			return openFailure(err)
		}
		f.r = r
	}
	if st[KeySource] == SourceLogical {
		pos, err := LogPositionFromState(st)
		if err != nil {
			return err
		}
		if start := f.r.Start(); start.LSN <= pos.LSN {
			walked, err := walkedFromState(st)
			if err != nil {
				return err
			}
			f.pos, f.walked, f.walk = pos, walked, nil
			f.mark, f.hasMark = markFromState(st)
			return nil
		}
		// The log begins after the settled position: its slot was dropped
		// and created again. What was committed in between comes from the
		// walk, from the settled cursor on.
		f.logger.Warn("outbox: the log begins after the settled log position; walking the table from the settled cursor before reading the log again",
			"settled", pos.String(), "log_start", f.r.Start().String())
		cur, err := fromLog(ctx, f.s, f.timeout, st)
		if err != nil {
			return err
		}
		return f.takeOver(ctx, &walkFeed{s: f.s, timeout: f.timeout, cur: cur, checkCounter: true})
	}
	w := &walkFeed{s: f.s, timeout: f.timeout}
	if err := w.load(ctx, st); err != nil {
		return err
	}
	return f.takeOver(ctx, w)
}

// takeOver starts walking the table with w before switching to the log
// (steps 2 and 3 of logFeed).
func (f *logFeed) takeOver(ctx context.Context, w *walkFeed) error {
	m, err := withinValue(ctx, f.timeout, f.ls.Mark)
	if err != nil {
		return fmt.Errorf("reading a log mark: %w", err)
	}
	f.walk, f.switchMark = w, m
	f.logger.Info("outbox: walking the table until the log can take over", "cursor_xid", w.cur.XID, "mark_xid", m.XID)
	return nil
}

// openFailure classifies an Open error for the pass.
func openFailure(err error) error {
	err = fmt.Errorf("opening the log: %w", err)
	if errors.Is(err, ErrLogLost) || errors.Is(err, ErrLogMisconfigured) {
		return refused(err)
	}
	return err
}

func (f *logFeed) scan(ctx context.Context, limit int) ([]Entry, error) {
	if f.r == nil {
		// The reader failed last pass: open it again from the position
		// this feed settled, which is the stored one.
		st, err := withinValue(ctx, f.timeout, f.s.State)
		if err != nil {
			return nil, fmt.Errorf("reading state: %w", err)
		}
		if err := f.load(ctx, st); err != nil {
			return nil, err
		}
	}
	if f.walk != nil {
		return f.walk.scan(ctx, limit)
	}
	f.batch, f.kept = LogBatch{}, nil
	b, err := withinValue(ctx, f.wait+f.timeout, func(ctx context.Context) (LogBatch, error) { return f.r.Read(ctx, f.pos, limit, f.wait) })
	if err != nil {
		if ctx.Err() == nil && !errors.Is(err, ErrReaderFenced) {
			f.close(ctx)
		}
		err = fmt.Errorf("reading the log: %w", err)
		if errors.Is(err, ErrLogLost) || errors.Is(err, ErrLogMisconfigured) {
			return nil, refused(err)
		}
		return nil, err
	}
	f.batch, f.kept = b, b.Entries[:0:0]
	entries := make([]Entry, 0, len(b.Entries))
	for _, e := range b.Entries {
		if e.Cursor().Compare(f.walked) <= 0 {
			continue // walked before the log took over
		}
		f.kept = append(f.kept, e)
		entries = append(entries, e.Entry)
	}
	return entries, nil
}

func (f *logFeed) settle(ctx context.Context, n int, all bool, park []Parked, state map[string]*string) error {
	if f.walk != nil {
		if err := f.walk.settle(ctx, n, all, park, state); err != nil {
			return err
		}
		if f.walk.caughtUp(all) {
			return f.switchOver(ctx)
		}
		return nil
	}
	to := f.pos
	switch {
	case all:
		to = f.batch.Reached
		if len(f.kept) > 0 && to.Compare(f.kept[len(f.kept)-1].Pos) < 0 {
			to = f.kept[len(f.kept)-1].Pos
		}
	case n > 0:
		to = f.kept[n-1].Pos
	}
	if to.Compare(f.pos) < 0 {
		to = f.pos // an empty read may report where it started
	}
	st := maps.Clone(state)
	if st == nil {
		st = map[string]*string{}
	}
	mark, hasMark, markAt := f.mark, f.hasMark, f.markAt
	passed := hasMark && to.LSN >= mark.LSN
	if passed {
		st[KeyLogSettledXID] = ptr(strconv.FormatUint(mark.XID, 10))
		st[KeyLogMarkLSN], st[KeyLogMarkXID] = nil, nil
		hasMark = false
	}
	if now := time.Now(); !hasMark && now.Sub(markAt) >= logMarkEvery {
		if m, err := withinValue(ctx, f.timeout, f.ls.Mark); err != nil {
			if ctx.Err() != nil {
				return err
			}
			f.logger.Warn("outbox: reading a log mark failed; retention waits for the next one", "err", err)
		} else {
			st[KeyLogMarkLSN] = ptr(strconv.FormatUint(m.LSN, 10))
			st[KeyLogMarkXID] = ptr(strconv.FormatUint(m.XID, 10))
			mark, hasMark, markAt = m, true, now
		}
	}
	settlement := LogSettlement{From: f.pos, To: to, Park: park, State: st}
	if err := within(ctx, f.timeout, func(ctx context.Context) error { return f.ls.SettleLog(ctx, settlement) }); err != nil {
		return err
	}
	f.pos, f.mark, f.hasMark, f.markAt = to, mark, hasMark, markAt
	if f.r == nil {
		return nil // the reader failed; the next one resumes from here
	}
	// Only now may the log forget: what it forgets is settled.
	if err := within(ctx, f.timeout, func(ctx context.Context) error { return f.r.Confirm(ctx, to) }); err != nil && ctx.Err() == nil {
		f.logger.Warn("outbox: confirming the settled position to the log failed; the next settlement confirms it", "position", to.String(), "err", err)
		if !errors.Is(err, ErrReaderFenced) {
			f.close(ctx)
		}
	}
	return nil
}

// switchOver is step 4 of logFeed: the walk has delivered everything the
// log will not, and one settlement makes the log the source.
func (f *logFeed) switchOver(ctx context.Context) error {
	cur, start := f.walk.cur, f.r.Start()
	lsn, seq := LogPositionState(start)
	wx, wid := CursorState(cur)
	state := map[string]*string{
		KeySource: ptr(SourceLogical), KeyLogLSN: ptr(lsn), KeyLogSeq: ptr(seq),
		KeyLogWalkedXID: ptr(wx), KeyLogWalkedID: ptr(wid),
		KeyLogSettledXID: ptr(strconv.FormatUint(f.switchMark.XID, 10)),
		KeyLogMarkLSN:    nil, KeyLogMarkXID: nil,
	}
	switched := Settlement{From: cur, To: cur, State: state}
	if err := within(ctx, f.timeout, func(ctx context.Context) error { return f.s.Settle(ctx, switched) }); err != nil {
		return err
	}
	f.logger.Info("outbox: the log is the source now", "log_start", start.String(), "walked_xid", cur.XID)
	f.pos, f.walked, f.walk, f.hasMark = start, cur, nil, false
	return nil
}

func (f *logFeed) idleDelay(d time.Duration) time.Duration {
	if f.walk != nil {
		return d
	}
	return 0 // Read waited IdleDelay for entries already
}

func (f *logFeed) close(ctx context.Context) {
	if f.r == nil {
		return
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := f.r.Close(cctx); err != nil {
		f.logger.Debug("outbox: closing the log reader", "err", err)
	}
	f.r = nil
}

// walkedFromState reads KeyLogWalkedXID and KeyLogWalkedID.
func walkedFromState(st map[string]string) (Cursor, error) {
	return CursorFromState(map[string]string{
		KeyLastScannedXID: orDefault(st[KeyLogWalkedXID], "0"),
		KeyLastScannedID:  orDefault(st[KeyLogWalkedID], NilID.String()),
	})
}

// markFromState reads the mark not yet passed, if any.
func markFromState(st map[string]string) (LogMark, bool) {
	lsn, err1 := strconv.ParseUint(st[KeyLogMarkLSN], 10, 64)
	xid, err2 := strconv.ParseUint(st[KeyLogMarkXID], 10, 64)
	if err1 != nil || err2 != nil {
		return LogMark{}, false
	}
	return LogMark{LSN: lsn, XID: xid}, true
}

func orDefault(v, def string) string {
	if v == "" {
		return def
	}
	return v
}
