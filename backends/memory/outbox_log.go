package memory

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"time"

	"github.com/baton-go/baton/core/outbox"
)

// commitLog is an OutboxStore's log of committed transactions, in commit
// order, as PostgreSQL's write-ahead log holds them for logical decoding:
// what an OutboxLog reads. The caller holds the store's mutex.
type commitLog struct {
	// txs are the transactions not yet forgotten, in commit order.
	txs []loggedTx
	// end is the log's end: each commit takes end+1 for its commit
	// record's start and end+2 for its end.
	end uint64
	// confirmed is the LSN the reader last confirmed; transactions that
	// end at or below it are forgotten, as a slot lets WAL go.
	confirmed uint64
	// grew is closed, and replaced, at every commit: readers waiting for
	// entries wake on it.
	grew chan struct{}
	// reader is the reader that has the log, if any.
	reader *logReader
	// lost makes the log unreadable, as an invalidated slot is.
	lost bool
}

// loggedTx is one committed transaction: its commit record's start and
// end, and its entries in the order it wrote them.
type loggedTx struct {
	commit, end uint64
	entries     []outbox.Entry
}

// pos is the log position of the i-th of the transaction's entries
// (outbox.LogPosition).
func (t loggedTx) pos(i int) outbox.LogPosition {
	if i == len(t.entries)-1 {
		return outbox.LogPosition{LSN: t.end}
	}
	return outbox.LogPosition{LSN: t.commit, Seq: uint32(i + 1)}
}

func (l *commitLog) commit(entries []outbox.Entry) {
	written := make([]outbox.Entry, len(entries))
	for i, e := range entries {
		e.Payload = slices.Clone(e.Payload)
		written[i] = e
	}
	l.txs = append(l.txs, loggedTx{commit: l.end + 1, end: l.end + 2, entries: written})
	l.end += 2
	l.wake()
}

func (l *commitLog) wake() {
	if l.grew != nil {
		close(l.grew)
	}
	l.grew = make(chan struct{})
}

// waiter is the channel the next commit closes.
func (l *commitLog) waiter() <-chan struct{} {
	if l.grew == nil {
		l.grew = make(chan struct{})
	}
	return l.grew
}

// OutboxLog is an outbox.LogStore over an OutboxStore's commit log: the
// reference adapter of the logical source. Every transaction an
// OutboxTx commits, and every requeue, enters the log at its commit, in
// commit order, whatever xid it took; a transaction still open holds
// nothing back. Its settled state lives in the OutboxStore's state, beside
// the walk's. Get it with OutboxStore.Log.
type OutboxLog struct {
	s *OutboxStore
}

var _ outbox.LogStore = (*OutboxLog)(nil)

// Log is the store's commit log, read as the outbox's logical source: a
// view of s, not a store of its own.
func (s *OutboxStore) Log() *OutboxLog { return &OutboxLog{s: s} }

// Lose makes the log unreadable from now on, as PostgreSQL invalidates a
// slot that held more WAL than max_slot_wal_keep_size: Open and Read fail
// with outbox.ErrLogLost.
func (l *OutboxLog) Lose() {
	l.s.mu.Lock()
	defer l.s.mu.Unlock()
	l.s.log.lost = true
}

var errLost = fmt.Errorf("%w: the memory log was lost (OutboxLog.Lose)", outbox.ErrLogLost)

// Open implements outbox.LogStore. The reader token is kept in the state,
// under outbox.KeyLogReaderToken, as the PostgreSQL adapter keeps it.
func (l *OutboxLog) Open(ctx context.Context, token uint64) (outbox.LogReader, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s := l.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.log.lost {
		return nil, errLost
	}
	stored := outbox.ReadLogReaderToken(s.state)
	if token < stored {
		return nil, fmt.Errorf("baton/memory: open the log: the term of token %d opened it after this one (token %d): %w", stored, token, outbox.ErrReaderFenced)
	}
	if cur := s.log.reader; cur != nil {
		if token == 0 {
			return nil, errors.New("baton/memory: open the log: another reader has it, and a lock without fencing tokens cannot end it")
		}
		cur.fenced = true
	}
	s.state[outbox.KeyLogReaderToken] = strconv.FormatUint(token, 10)
	r := &logReader{l: l, start: outbox.LogPosition{LSN: s.log.confirmed}}
	s.log.reader = r
	return r, nil
}

// SettleLog implements outbox.LogStore. Everything is checked before
// anything changes, so a refused settlement writes nothing.
func (l *OutboxLog) SettleLog(ctx context.Context, st outbox.LogSettlement) error {
	if err := outbox.ValidateLogSettlement(st); err != nil {
		return fmt.Errorf("baton/memory: settle log: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	s := l.s
	s.mu.Lock()
	defer s.mu.Unlock()
	stored, err := outbox.LogPositionFromState(s.state)
	if err != nil {
		return fmt.Errorf("baton/memory: settle log: %w", err)
	}
	if stored != st.From {
		return fmt.Errorf("%w: the stored log position is %s, the pass began at %s", outbox.ErrCursorMoved, stored, st.From)
	}
	seen := make(map[outbox.ID]bool, len(st.Park))
	for _, p := range st.Park {
		id := p.Entry.ID
		_, inOutbox := s.ids[id]
		if !inOutbox || seen[id] {
			return fmt.Errorf("baton/memory: settle log: entry %s is not in the outbox, or is parked twice; nothing was written", id)
		}
		seen[id] = true
	}
	now := s.clock()
	for _, p := range st.Park {
		s.park(s.entry(p.Entry.ID), p.Reason, now)
	}
	for k, v := range st.State {
		if v == nil {
			delete(s.state, k)
		} else {
			s.state[k] = *v
		}
	}
	s.state[outbox.KeyLogLSN], s.state[outbox.KeyLogSeq] = outbox.LogPositionState(st.To)
	return nil
}

// entry finds a committed entry by id; the caller holds the mutex and
// knows it is there.
func (s *OutboxStore) entry(id outbox.ID) outbox.Entry {
	i := slices.IndexFunc(s.entries, func(e outbox.Entry) bool { return e.ID == id })
	return s.entries[i]
}

// Mark implements outbox.LogStore: the log's end, and the smallest xid of
// a transaction still open (or the next xid, with none open).
func (l *OutboxLog) Mark(ctx context.Context) (outbox.LogMark, error) {
	if err := ctx.Err(); err != nil {
		return outbox.LogMark{}, err
	}
	s := l.s
	s.mu.Lock()
	defer s.mu.Unlock()
	xid := s.horizon()
	if xid == 0 {
		xid = s.nextXID
	}
	return outbox.LogMark{LSN: s.log.end, XID: xid}, nil
}

// logReader is one term's reader of an OutboxLog.
type logReader struct {
	l      *OutboxLog
	start  outbox.LogPosition
	fenced bool // guarded by the store's mutex
	closed bool
}

func (r *logReader) Start() outbox.LogPosition { return r.start }

// check is the state every reader call starts from; the caller holds the
// mutex.
func (r *logReader) check() error {
	switch {
	case r.fenced:
		return fmt.Errorf("baton/memory: the log reader: %w", outbox.ErrReaderFenced)
	case r.closed:
		return errors.New("baton/memory: the log reader is closed")
	case r.l.s.log.lost:
		return errLost
	}
	return nil
}

// Read implements outbox.LogReader.
func (r *logReader) Read(ctx context.Context, after outbox.LogPosition, limit int, wait time.Duration) (outbox.LogBatch, error) {
	switch {
	case limit < 1:
		return outbox.LogBatch{}, fmt.Errorf("baton/memory: read the log: the limit is %d; it must be at least 1", limit)
	case wait < 0:
		return outbox.LogBatch{}, fmt.Errorf("baton/memory: read the log: the wait is %v; it must not be negative", wait)
	}
	var deadline <-chan time.Time
	for {
		if err := ctx.Err(); err != nil {
			return outbox.LogBatch{}, err
		}
		b, grew, err := r.read(after, limit)
		if err != nil || len(b.Entries) > 0 || wait == 0 {
			return b, err
		}
		if deadline == nil {
			t := time.NewTimer(wait)
			defer t.Stop()
			deadline = t.C
		}
		select {
		case <-ctx.Done():
			return outbox.LogBatch{}, ctx.Err()
		case <-deadline:
			return b, nil
		case <-grew:
		}
	}
}

// read takes what the log holds after after, and the channel its next
// commit closes.
func (r *logReader) read(after outbox.LogPosition, limit int) (outbox.LogBatch, <-chan struct{}, error) {
	s := r.l.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := r.check(); err != nil {
		return outbox.LogBatch{}, nil, err
	}
	log := &s.log
	b := outbox.LogBatch{Reached: after}
	// The first transaction that ends after after.LSN holds the first
	// entry after it.
	first := sort.Search(len(log.txs), func(i int) bool { return log.txs[i].end > after.LSN })
	taken := 0 // payload bytes, as the byte budget counts them (R19)
	for _, tx := range log.txs[first:] {
		for i, e := range tx.entries {
			p := tx.pos(i)
			if p.Compare(after) <= 0 {
				continue
			}
			if len(b.Entries) == limit || !outbox.ScanHasRoom(taken) {
				// Cut by the limit or the byte budget: Reached is the last
				// entry.
				return b, log.waiter(), nil
			}
			e.Payload = slices.Clone(e.Payload)
			b.Entries = append(b.Entries, outbox.LogEntry{Entry: e, Pos: p})
			b.Reached = p
			taken += len(e.Payload)
		}
	}
	// Everything the log holds was taken: the read reached its end.
	if end := (outbox.LogPosition{LSN: log.end}); end.Compare(b.Reached) > 0 {
		b.Reached = end
	}
	return b, log.waiter(), nil
}

// Confirm implements outbox.LogReader: the log forgets every transaction
// that ends at or below p.LSN.
func (r *logReader) Confirm(ctx context.Context, p outbox.LogPosition) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s := r.l.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := r.check(); err != nil {
		return err
	}
	log := &s.log
	if p.LSN > log.confirmed {
		log.confirmed = p.LSN
		keep := sort.Search(len(log.txs), func(i int) bool { return log.txs[i].end > p.LSN })
		log.txs = slices.Delete(log.txs, 0, keep)
	}
	return nil
}

// Close implements outbox.LogReader.
func (r *logReader) Close(ctx context.Context) error {
	s := r.l.s
	s.mu.Lock()
	defer s.mu.Unlock()
	r.closed = true
	if s.log.reader == r {
		s.log.reader = nil
	}
	return nil
}
