package conformance_test

import (
	"errors"
	"testing"
	"time"

	"github.com/baton-go/baton/backends/memory"
	"github.com/baton-go/baton/conformance"
	"github.com/baton-go/baton/core/projection"
)

// projectionVariant is the memory projection store with one rule of
// projection.Store broken.
type projectionVariant struct {
	variant
	store func(st *memory.ProjectionStore) projection.Store
	// harness, if set, changes the harness around the store.
	harness func(h *conformance.ProjectionHarness)
}

var projectionVariants = []projectionVariant{
	{variant: variant{"unknown-subject-reads-as-empty", "P6", "EmptyStoreSaysNoProjection"},
		store: func(st *memory.ProjectionStore) projection.Store { return unknownIsEmpty{st} }},
	{variant: variant{"grants-in-write-order", "P1", "ReplaceMakesTheNewGenerationActive"},
		store: func(st *memory.ProjectionStore) projection.Store { return &writeOrder{ProjectionStore: st} }},
	{variant: variant{"mask-ignores-the-resource-type", "P7", "PointReadsAnswerFromTheActiveGeneration"},
		store: func(st *memory.ProjectionStore) projection.Store { return maskByID{st} }},
	{variant: variant{"empty-set-not-stored", "P2", "EmptyGrantSetIsAValidGeneration"},
		store: func(st *memory.ProjectionStore) projection.Store { return emptyNotStored{st} }},
	{variant: variant{"top-bit-lost", "P3", "MasksRoundTripAllSixtyFourBits"},
		store: func(st *memory.ProjectionStore) projection.Store { return topBitLost{st} }},
	{variant: variant{"replace-caps-the-grant-count", "P4", "LargeGenerationRoundTrips"},
		store: func(st *memory.ProjectionStore) projection.Store { return cappedReplace{st} }},
	{variant: variant{"failed-replace-burns-its-generation", "P5", "FailedReplaceKeepsThePreviousGeneration"},
		store: func(st *memory.ProjectionStore) projection.Store { return &burnsGenerations{ProjectionStore: st} }},
	{variant: variant{"flip-is-not-atomic", "P8", "ReadersSeeOldOrNewNeverAMix"},
		store: func(st *memory.ProjectionStore) projection.Store { return &growingReplace{ProjectionStore: st} }},
	{variant: variant{"superseded-listed-as-active", "P9", "ExactlyOneActiveGenerationAfterManyRefreshes"},
		store: func(st *memory.ProjectionStore) projection.Store { return allActive{st} }},
	{variant: variant{"flip-checks-staleness-then-writes", "P10", "ConcurrentRefreshesLeaveExactlyOneActive"},
		store: func(st *memory.ProjectionStore) projection.Store {
			return &checkThenFlip{ProjectionStore: st, meet: rendezvous{patience: 100 * time.Millisecond}}
		}},
	{variant: variant{"reserve-reads-then-increments", "P11", "ReservationsIncreaseAcrossNodes"},
		store: func(st *memory.ProjectionStore) projection.Store {
			return &racyReserve{ProjectionStore: st, meet: rendezvous{patience: 100 * time.Millisecond}}
		}},
	{variant: variant{"last-flip-wins", "P12", "AnOlderReservationIsRefusedAsStale"},
		store: func(st *memory.ProjectionStore) projection.Store { return lastFlipWins{st} }},
	{variant: variant{"stale-replace-reports-success", "P13", "FlipsInAnyOrderNeverMoveTheActiveGenerationBack"},
		store: func(st *memory.ProjectionStore) projection.Store { return staleSucceeds{st} }},
	{variant: variant{"sweep-drops-active-generations", "P14", "SweepRemovesOnlySupersededGenerations"},
		store: func(st *memory.ProjectionStore) projection.Store { return newSweepDropsActive(st) }},
	{variant: variant{"parallel-sweeps-count-twice", "P15", "SweepIsIdempotentUnderParallelRuns"},
		store: func(st *memory.ProjectionStore) projection.Store {
			return &doubleCountingSweep{ProjectionStore: st, meet: rendezvous{patience: 100 * time.Millisecond}}
		}},
	{variant: variant{"mask-accepts-an-invalid-subject", "P16", "InvalidInputWritesNothing"},
		store: func(st *memory.ProjectionStore) projection.Store { return invalidSubjectUnknown{st} }},
	{variant: variant{"cancel-loses-the-cause", "P17", "CancelledContextIsRecognisable"},
		store: func(st *memory.ProjectionStore) projection.Store { return projectionCauseLost{st} }},
	{variant: variant{"schema-mismatch-unrecognisable", "P18", "MissingTablesAreASchemaMismatch"},
		store: func(st *memory.ProjectionStore) projection.Store { return st },
		harness: func(h *conformance.ProjectionHarness) {
			h.Unmigrated = func(*testing.T) conformance.ProjectionHarness {
				return conformance.ProjectionHarness{Store: noTables{err: errors.New(`relation "baton_projection_header" does not exist`)}}
			}
		}},
}

func projectionBroken() brokenSuite {
	return newBrokenSuite("RunProjectionStore", "TestBrokenProjectionStoreChild", "BATON_CONFORMANCE_BROKEN_PROJECTION", projectionVariants)
}

func TestRunProjectionStore_FailsEveryBrokenStore(t *testing.T) { projectionBroken().run(t) }

// TestBrokenProjectionStoreChild runs the suite against the variant its
// parent names, and is expected to fail.
func TestBrokenProjectionStoreChild(t *testing.T) {
	v := chosen(t, projectionBroken().env, projectionVariants)
	conformance.RunProjectionStore(t, func(t *testing.T) conformance.ProjectionHarness {
		memProjections, err := memory.NewProjectionStore(memory.ProjectionStoreOptions{})
		if err != nil {
			t.Fatal(err)
		}
		h := projectionHarness(v.store(memProjections))
		if v.harness != nil {
			v.harness(&h)
		}
		return h
	}, conformance.ProjectionFeatures{})
}
