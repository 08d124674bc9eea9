package conformance

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/baton-go/baton/core/projection"
)

// Sweeping: superseded generations go, each exactly once, and active ones
// stay.

func (s *projectionSuite) sweepChecks() []check {
	return area(s.setup,
		subtest[projectionBundle]{"SweepRemovesOnlySupersededGenerations", s.sweepSuperseded},
		subtest[projectionBundle]{"SweepIsIdempotentUnderParallelRuns", s.sweepsInParallel},
	)
}

func (s *projectionSuite) sweepSuperseded(t *testing.T, env projectionBundle) {
	h, ctx := env.h, env.ctx
	heidi, ivan, judy := user("heidi"), user("ivan"), user("judy")
	var last []projection.Grant
	var lastGen projection.Generation
	for i := range 5 {
		last = grantSet("doc", fmt.Sprintf("h%d", i), 3, uint64(i))
		lastGen = mustReplace(t, ctx, h.Store, heidi, last)
	}
	ivanSet := grantSet("doc", "i", 4, 9)
	ivanGen := mustReplace(t, ctx, h.Store, ivan, ivanSet)
	mustReplace(t, ctx, h.Store, judy, nil)
	judyGen := mustReplace(t, ctx, h.Store, judy, nil)

	if n := mustSweep(t, ctx, h.Second); n != 5 {
		t.Errorf("Sweep deleted %d generations, want the 5 superseded ones (4 of heidi, 1 of judy)", n)
	}
	for _, c := range []struct {
		subject projection.Subject
		gen     projection.Generation
		grants  []projection.Grant
	}{{heidi, lastGen, last}, {ivan, ivanGen, ivanSet}, {judy, judyGen, nil}} {
		infos := mustGenerations(t, ctx, h.Store, c.subject)
		if len(infos) != 1 || !infos[0].Active || infos[0].Generation != c.gen {
			t.Errorf("after the sweep, %s has generations %+v; want only the active %d", c.subject, infos, c.gen)
		}
		checkSnapshot(t, ctx, h.Store, c.subject, c.gen, c.grants)
	}
	if m, found := mustMask(t, ctx, h.Second, heidi, "doc", last[0].ResourceID); !found || m != last[0].Mask {
		t.Errorf("after the sweep Mask(heidi) = %v, %v; want %v", m, found, last[0].Mask)
	}
	if _, found, err := h.Second.Mask(ctx, judy, "doc", "x"); err != nil || found {
		t.Errorf("after the sweep, the empty active generation of judy reads as found=%v, err=%v", found, err)
	}
	// Idempotent: nothing left to do.
	for range 2 {
		if n := mustSweep(t, ctx, h.Store); n != 0 {
			t.Errorf("a second sweep deleted %d generations; nothing was superseded", n)
		}
	}
	checkSnapshot(t, ctx, h.Second, heidi, lastGen, last)
}

func (s *projectionSuite) sweepsInParallel(t *testing.T, env projectionBundle) {
	h, ctx := env.h, env.ctx
	const subjects, rounds = 6, 4
	finals := map[projection.Subject][]projection.Grant{}
	active := map[projection.Subject]projection.Generation{}
	for i := range subjects {
		subject := user(fmt.Sprintf("u%d", i))
		for r := range rounds {
			finals[subject] = grantSet("doc", fmt.Sprintf("s%d", r), 2+r, uint64(i*10+r))
			active[subject] = mustReplace(t, ctx, h.pick(r), subject, finals[subject])
		}
	}
	var (
		wg      sync.WaitGroup
		deleted atomic.Int64
		stop    atomic.Bool
		errs    = make(chan error, parallelSweeps+subjects)
	)
	start := make(chan struct{})
	for i := range parallelSweeps {
		st := h.pick(i)
		wg.Go(func() {
			<-start
			n, err := st.Sweep(ctx)
			if err != nil {
				errs <- fmt.Errorf("sweep %d: %w", i, err)
				return
			}
			deleted.Add(int64(n))
		})
	}
	// Readers read every active generation while the sweeps run.
	var rwg sync.WaitGroup
	for i := range 2 {
		st := h.pick(i)
		rwg.Go(func() {
			<-start
			for !stop.Load() {
				for subject, want := range finals {
					snap, err := st.Snapshot(ctx, subject)
					if err != nil {
						errs <- fmt.Errorf("Snapshot(%s) during the sweeps: %w", subject, err)
						return
					}
					if diff := grantDiff(snap.Grants, sortedGrants(want)); diff != "" || snap.Generation != active[subject] {
						errs <- fmt.Errorf("Snapshot(%s) during the sweeps is generation %d (want %d): %s", subject, snap.Generation, active[subject], diff)
						return
					}
				}
			}
		})
	}
	close(start)
	wg.Wait()
	stop.Store(true)
	rwg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if want := subjects * (rounds - 1); deleted.Load() != int64(want) {
		t.Errorf("%d parallel sweeps deleted %d generations in all, want each of the %d superseded ones deleted exactly once", parallelSweeps, deleted.Load(), want)
	}
	for subject, gen := range active {
		infos := mustGenerations(t, ctx, h.Store, subject)
		if len(infos) != 1 || !infos[0].Active || infos[0].Generation != gen {
			t.Errorf("after the sweeps %s has generations %+v, want only the active %d", subject, infos, gen)
		}
	}
	if n := mustSweep(t, ctx, h.Second); n != 0 {
		t.Errorf("a sweep after the parallel ones deleted %d generations", n)
	}
}
