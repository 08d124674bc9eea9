package demo

import (
	"sync"

	"github.com/baton-go/baton/core/outbox"
)

// txOutcome is how a producer's transaction ended.
type txOutcome int

const (
	txCommitted txOutcome = iota + 1
	txRolledBack
	// txInDoubt: the commit returned an error (the connection died under
	// it); whether it happened is read back from the store.
	txInDoubt
)

// txRecord is one business transaction as its producer saw it.
type txRecord struct {
	Instance string
	Profile  string
	XID      uint64
	Entries  []entryRecord
	Outcome  txOutcome
}

// entryRecord is one outbox entry a producer enqueued.
type entryRecord struct {
	ID      outbox.ID
	Lane    string
	Profile string
	Label   string // graph.metadata entries
}

// ledger is what the producers did, kept apart from the stores so the
// verification can compare the two.
type ledger struct {
	mu       sync.Mutex
	txs      []*txRecord
	profiles []string
	seq      int
	numbers  map[int]int
}

func newLedger() *ledger { return &ledger{numbers: map[int]int{}} }

func (l *ledger) add(r *txRecord) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.txs = append(l.txs, r)
}

func (l *ledger) addProfile(id string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.profiles = append(l.profiles, id)
}

// profileList is every profile whose creation committed, in commit order.
func (l *ledger) profileList() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.profiles...)
}

func (l *ledger) nextSeq() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.seq++
	return l.seq
}

func (l *ledger) nextProfileNumber(instance int) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.numbers[instance]++
	return l.numbers[instance]
}

func (l *ledger) all() []*txRecord {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]*txRecord(nil), l.txs...)
}

// counts is the number of transactions per outcome so far.
func (l *ledger) counts() (committed, rolledBack, inDoubt int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, t := range l.txs {
		switch t.Outcome {
		case txCommitted:
			committed++
		case txRolledBack:
			rolledBack++
		case txInDoubt:
			inDoubt++
		}
	}
	return
}
