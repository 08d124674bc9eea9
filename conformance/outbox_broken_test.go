package conformance_test

import (
	"errors"
	"testing"
	"time"

	"github.com/baton-go/baton/backends/memory"
	"github.com/baton-go/baton/conformance"
	"github.com/baton-go/baton/core/outbox"
)

// outboxVariant is the memory outbox store, or its producer, with one rule
// of outbox.Store broken. Its stores are in outbox_variants_test.go and
// outbox_producers_test.go.
type outboxVariant struct {
	variant
	harness func(st *memory.OutboxStore) conformance.OutboxHarness
}

// store is the reference harness with the store replaced.
func store(wrap func(*memory.OutboxStore) outbox.Store) func(*memory.OutboxStore) conformance.OutboxHarness {
	return func(st *memory.OutboxStore) conformance.OutboxHarness {
		h := outboxHarness(st)
		h.Store = wrap(st)
		h.HoldSettle = settleAtOnce(h.Store)
		return h
	}
}

// producer is the reference harness with the producer replaced.
func producer(wrap func(*memory.OutboxStore) conformance.OutboxProducer) func(*memory.OutboxStore) conformance.OutboxHarness {
	return func(st *memory.OutboxStore) conformance.OutboxHarness {
		h := outboxHarness(st)
		h.Producer = wrap(st)
		return h
	}
}

var outboxVariants = []outboxVariant{
	{variant{"scan-ignores-the-horizon", "O1", "OpenOlderTransactionHoldsBackNewer"},
		func(st *memory.OutboxStore) conformance.OutboxHarness {
			return newHorizonBlind(st, blindHorizon).harness()
		}},
	{variant{"xid-per-entry", "O2", "EntriesOfOneTransactionComeOutInIDOrder"},
		producer(func(st *memory.OutboxStore) conformance.OutboxProducer { return xidPerEntry{st} })},
	{variant{"xid-taken-at-commit", "O3", "TransactionsComeOutInXIDOrderNotCommitOrder"},
		producer(func(st *memory.OutboxStore) conformance.OutboxProducer { return xidAtCommit{st} })},
	{variant{"xid-taken-at-begin", "O4", "TransactionWithoutWritesHoldsNothingBack"},
		func(st *memory.OutboxStore) conformance.OutboxHarness {
			return (&xidAtBegin{OutboxStore: st}).harness()
		}},
	{variant{"rollback-commits", "O5", "RolledBackEntriesNeverAppear"},
		producer(func(st *memory.OutboxStore) conformance.OutboxProducer {
			return txWrap(st, func(tx *memory.OutboxTx) conformance.OutboxTx { return rollbackCommits{tx} })
		})},
	{variant{"horizon-is-the-newest-open-transaction", "O6", "ConcurrentProducersAreWalkedWithoutGaps"},
		func(st *memory.OutboxStore) conformance.OutboxHarness {
			return newHorizonBlind(st, newestOpen).harness()
		}},
	{variant{"scan-includes-the-cursor", "O7", "ScanHonoursCursorAndLimit"},
		store(func(st *memory.OutboxStore) outbox.Store { return scanInclusive{st} })},
	{variant{"scan-ignores-the-byte-budget", "O8", "ScanStopsAtTheByteBudget"},
		store(func(st *memory.OutboxStore) outbox.Store { return scanPastBudget{st} })},
	{variant{"invalid-entry-aborts-the-transaction", "O9", "EnqueueRejectsInvalidEntries"},
		producer(func(st *memory.OutboxStore) conformance.OutboxProducer {
			return txWrap(st, func(tx *memory.OutboxTx) conformance.OutboxTx { return &abortOnInvalid{OutboxTx: tx} })
		})},
	{variant{"invalid-trace-context-dropped-silently", "O9", "EnqueueRejectsInvalidEntries"},
		producer(func(st *memory.OutboxStore) conformance.OutboxProducer {
			return txWrap(st, func(tx *memory.OutboxTx) conformance.OutboxTx { return traceUnchecked{tx} })
		})},
	{variant{"oversized-payload-without-the-sentinel", "O10", "EnqueueRejectsOversizedPayloads"},
		producer(func(st *memory.OutboxStore) conformance.OutboxProducer {
			return txWrap(st, func(tx *memory.OutboxTx) conformance.OutboxTx { return ownSizeCheckTx{tx} })
		})},
	{variant{"duplicate-ids-dropped-silently", "O11", "EnqueueRejectsDuplicateIDs"},
		producer(func(st *memory.OutboxStore) conformance.OutboxProducer {
			return txWrap(st, func(tx *memory.OutboxTx) conformance.OutboxTx { return swallowIDInUse{tx, st, false} })
		})},
	{variant{"enqueue-ignores-open-transactions", "O12", "ConcurrentTransactionsCannotEnqueueOneID"},
		producer(func(st *memory.OutboxStore) conformance.OutboxProducer { return newOpenBlind(st) })},
	{variant{"dead-letter-ids-dropped-silently", "O13", "EnqueueRejectsTheIDOfADeadLetter"},
		producer(func(st *memory.OutboxStore) conformance.OutboxProducer {
			return txWrap(st, func(tx *memory.OutboxTx) conformance.OutboxTx { return swallowIDInUse{tx, st, true} })
		})},
	{variant{"enqueue-checks-dead-letters-before-the-park-commits", "O14", "EnqueueOfAnIDBeingParkedIsRefused"},
		func(st *memory.OutboxStore) conformance.OutboxHarness {
			b := &staleCheck{st: st}
			h := outboxHarness(st)
			h.Producer, h.HoldSettle = b, b.holdSettle
			return h
		}},
	{variant{"ended-transaction-still-usable", "O15", "TransactionIsDoneAfterCommitOrRollback"},
		producer(func(st *memory.OutboxStore) conformance.OutboxProducer {
			return txWrap(st, func(tx *memory.OutboxTx) conformance.OutboxTx { return &neverDone{OutboxTx: tx} })
		})},
	{variant{"settle-without-compare-and-set", "O16", "SettleIsCompareAndSet"},
		store(func(st *memory.OutboxStore) outbox.Store { return settleBlindly{st} })},
	{variant{"settle-compares-only-the-xid", "O16", "SettleIsCompareAndSet"},
		store(func(st *memory.OutboxStore) outbox.Store { return settleByXID{st} })},
	{variant{"settle-from-ahead-wins", "O17", "StaleSettleLoses"},
		store(func(st *memory.OutboxStore) outbox.Store { return settleFromAhead{st} })},
	{variant{"backward-settle-ignored", "O18", "CursorNeverGoesBackwards"},
		store(func(st *memory.OutboxStore) outbox.Store { return backwardStandsStill{st} })},
	{variant{"settle-checks-then-writes", "O19", "ConcurrentFirstSettlesOneWins"},
		store(func(st *memory.OutboxStore) outbox.Store {
			return &checkThenSettle{OutboxStore: st, meet: rendezvous{patience: 100 * time.Millisecond}}
		})},
	{variant{"park-keeps-no-payload", "O20", "ParkingMovesEntriesToDeadLetters"},
		store(func(st *memory.OutboxStore) outbox.Store { return noDeadPayload{st} })},
	{variant{"park-skips-unknown-entries", "O21", "ParkingAnUnknownEntryWritesNothing"},
		store(func(st *memory.OutboxStore) outbox.Store { return parkWhatIsThere{st} })},
	{variant{"state-nil-keeps-the-key", "O22", "StateUpsertsAndRemovesKeys"},
		store(func(st *memory.OutboxStore) outbox.Store { return nilKeepsKey{st} })},
	{variant{"settle-cleans-text-instead-of-refusing", "O23", "SettleRefusesTextNoStoreCanKeep"},
		store(func(st *memory.OutboxStore) outbox.Store { return cleanText{st} })},
	{variant{"settle-cuts-long-reasons", "O24", "SettleKeepsEveryStorableReasonExactly"},
		store(func(st *memory.OutboxStore) outbox.Store { return cutReasons{st} })},
	{variant{"next-xid-is-the-last-one-taken", "O25", "NextXIDIsAboveEveryCommittedEntry"},
		store(func(st *memory.OutboxStore) outbox.Store { return lastXID{st} })},
	{variant{"dead-letters-listed-oldest-first", "O26", "DeadLettersListWithoutPayloadsAndPaginate"},
		store(func(st *memory.OutboxStore) outbox.Store { return oldestFirst{st} })},
	{variant{"unknown-dead-letter-without-the-sentinel", "O27", "UnknownDeadLetterIsNotFound"},
		store(func(st *memory.OutboxStore) outbox.Store { return plainNotFound{st} })},
	{variant{"requeue-reuses-the-old-id", "O28", "RequeueAppendsAFreshEntry"},
		store(func(st *memory.OutboxStore) outbox.Store { return requeueInPlace{st} })},
	{variant{"second-requeue-succeeds", "O29", "RequeueTwiceIsAlreadyRequeued"},
		store(func(st *memory.OutboxStore) outbox.Store { return requeueAgain{st} })},
	{variant{"requeue-refusal-hidden", "O30", "RequeueRejectsUsedOrNilIDs"},
		store(func(st *memory.OutboxStore) outbox.Store { return requeueRefusalHidden{st} })},
	{variant{"bulk-requeue-in-id-order", "O43", "BulkRequeueKeepsTheOrderAndRefusesRequeued"},
		store(func(st *memory.OutboxStore) outbox.Store { return bulkByID{st} })},
	{variant{"bulk-requeue-fails-on-a-requeued-one", "O43", "BulkRequeueKeepsTheOrderAndRefusesRequeued"},
		store(func(st *memory.OutboxStore) outbox.Store { return bulkAllOrNothing{st} })},
	{variant{"delete-ignores-the-cursor", "O31", "DeleteDeliveredStaysAtOrBelowTheCursor"},
		store(func(st *memory.OutboxStore) outbox.Store { return deleteEverything{st} })},
	{variant{"delete-delivered-ignores-the-window", "O32", "DeleteDeliveredHonoursTheWindow"},
		store(func(st *memory.OutboxStore) outbox.Store { return noWindow{st} })},
	{variant{"delete-requeued-ignores-the-window", "O33", "DeleteRequeuedKeepsUnreplayedDeadLetters"},
		store(func(st *memory.OutboxStore) outbox.Store { return noWindow{st} })},
	{variant{"scan-accepts-limit-zero", "O34", "InvalidArgumentsAreErrors"},
		store(func(st *memory.OutboxStore) outbox.Store { return zeroLimitScan{st} })},
	{variant{"cancel-loses-the-cause", "O35", "CancelledContextIsRecognisable"},
		store(func(st *memory.OutboxStore) outbox.Store { return outboxCauseLost{st} })},
	{variant{"schema-mismatch-unrecognisable", "O36", "MissingTablesAreASchemaMismatch"},
		func(st *memory.OutboxStore) conformance.OutboxHarness {
			h := outboxHarness(st)
			bare := noTables{err: errors.New(`relation "baton_outbox" does not exist`)}
			h.Unmigrated = func(*testing.T) conformance.OutboxHarness {
				return conformance.OutboxHarness{Store: bare, Producer: bare}
			}
			return h
		}},
	{variant{"commit-never-signals", "O37", "ACommitWakesAnIdleListener"}, flawedWake(neverSignals)},
	{variant{"rollback-signals", "O38", "ARollbackWakesNobody"}, flawedWake(rollbacksSignal)},
	{variant{"signal-decided-at-the-first-write", "O39", "AnEntryEnqueuedBeforeIdleIsNeverMissed"}, flawedWake(decidedAtEnqueue)},
	{variant{"idle-reports-no-newest-entry", "O40", "IdleReportsTheNewestEntryAfterTheCursor"}, flawedWake(newestIsZero)},
	{variant{"listener-dead-after-a-timeout", "O41", "AWaitThatTimesOutLeavesTheListenerWorking"}, flawedWake(deadAfterTimeout)},
	{variant{"one-channel-for-every-outbox", "O42", "AnotherOutboxDoesNotWakeIt"}, flawedWake(oneChannelForAll)},
	{variant{"enqueue-drops-the-trace-context", "O44", "TraceContextTravelsWithTheEntry"},
		producer(func(st *memory.OutboxStore) conformance.OutboxProducer {
			return txWrap(st, func(tx *memory.OutboxTx) conformance.OutboxTx { return traceDropped{tx} })
		})},
	{variant{"dead-letter-drops-the-trace-context", "O44", "TraceContextTravelsWithTheEntry"},
		store(func(st *memory.OutboxStore) outbox.Store { return deadWithoutTrace{st} })},
}

func outboxBroken() brokenSuite {
	return newBrokenSuite("RunOutboxStore", "TestBrokenOutboxStoreChild", "BATON_CONFORMANCE_BROKEN_OUTBOX", outboxVariants)
}

func TestRunOutboxStore_FailsEveryBrokenStore(t *testing.T) { outboxBroken().run(t) }

// TestBrokenOutboxStoreChild runs the suite against the variant its parent
// names, and is expected to fail.
func TestBrokenOutboxStoreChild(t *testing.T) {
	v := chosen(t, outboxBroken().env, outboxVariants)
	conformance.RunOutboxStore(t, func(t *testing.T) conformance.OutboxHarness {
		memOutbox, err := memory.NewOutboxStore(memory.OutboxStoreOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return v.harness(memOutbox)
	}, outboxFeatures)
}
