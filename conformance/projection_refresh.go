package conformance

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/baton-go/baton/core/projection"
)

// Refreshing: reservations order the fetches, and the active generation is
// always the largest, whatever order concurrent flips arrive in.

func (s *projectionSuite) refreshChecks() []check {
	return area(s.setup,
		subtest[projectionBundle]{"ExactlyOneActiveGenerationAfterManyRefreshes", s.manyRefreshes},
		subtest[projectionBundle]{"ConcurrentRefreshesLeaveExactlyOneActive", s.concurrentRefreshes},
		subtest[projectionBundle]{"ReservationsIncreaseAcrossNodes", s.reservationsIncrease},
		subtest[projectionBundle]{"AnOlderReservationIsRefusedAsStale", s.olderReservationRefused},
		subtest[projectionBundle]{"FlipsInAnyOrderNeverMoveTheActiveGenerationBack", s.flipsInAnyOrder},
	)
}

func (s *projectionSuite) manyRefreshes(t *testing.T, env projectionBundle) {
	h, ctx := env.h, env.ctx
	erin := user("erin")
	var gens []projection.Generation
	var last []projection.Grant
	for i := range 20 {
		last = grantSet("doc", fmt.Sprintf("r%d", i), 1+i%4, uint64(i))
		gens = append(gens, mustReplace(t, ctx, h.pick(i), erin, last))
		infos := mustGenerations(t, ctx, h.pick(i+1), erin)
		if got := activeOf(infos); len(got) != 1 || got[0] != gens[i] {
			t.Fatalf("after refresh %d the active generations are %v, want exactly [%d]", i, got, gens[i])
		}
	}
	checkSnapshot(t, ctx, h.Store, erin, gens[len(gens)-1], last)
	if got := generationNumbers(mustGenerations(t, ctx, h.Store, erin)); !slices.Equal(got, gens) {
		t.Errorf("Generations = %v, want every generation written, %v, until a sweep", got, gens)
	}
}

func (s *projectionSuite) concurrentRefreshes(t *testing.T, env projectionBundle) {
	h, ctx := env.h, env.ctx
	frank := user("frank")
	sets := make([][]projection.Grant, racingRefreshers)
	for i := range sets {
		// Each set has resources of its own and shares "common" with
		// a mask of its own, so any blend of two sets is visible.
		sets[i] = append(grantSet("doc", fmt.Sprintf("w%02d", i), 8, uint64(i)),
			projection.Grant{ResourceType: "doc", ResourceID: "common", Mask: projection.Mask(i + 1)})
	}
	initial := mustReplace(t, ctx, h.Store, frank, sets[0])

	var (
		wg      sync.WaitGroup
		done    = make(chan struct{})
		written sync.Map // Generation → set index
		stale   sync.Map // Generation → true, refused as stale
		errs    = make(chan error, 1000)
	)
	report := func(err error) {
		select {
		case errs <- err:
		default:
		}
	}
	for i := range racingRefreshers {
		st := h.pick(i)
		wg.Go(func() {
			for range 3 {
				gen, err := reserveAndReplace(ctx, st, frank, sets[i])
				switch {
				case errors.Is(err, projection.ErrStale):
					stale.Store(gen, true) // a later reservation flipped first
				case err != nil:
					report(fmt.Errorf("refresher %d: Replace: %w", i, err))
					return
				default:
					written.Store(gen, i)
				}
			}
		})
	}
	// Meanwhile, at every moment exactly one generation is active.
	var checks atomic.Int64
	var cwg sync.WaitGroup
	for i := range 2 {
		st := h.pick(i)
		cwg.Go(func() {
			for {
				select {
				case <-done:
					return
				default:
				}
				infos, err := st.Generations(ctx, frank)
				if err != nil {
					report(fmt.Errorf("Generations during refreshes: %w", err))
					return
				}
				if a := activeOf(infos); len(a) != 1 {
					report(fmt.Errorf("during concurrent refreshes %d generations were active at once: %v", len(a), a))
					return
				}
				checks.Add(1)
			}
		})
	}
	wg.Wait()
	close(done)
	cwg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	infos := mustGenerations(t, ctx, h.Store, frank)
	active := activeOf(infos)
	if len(active) != 1 {
		t.Fatalf("after %d concurrent refreshes, %d generations are active: %v", racingRefreshers*3, len(active), active)
	}
	succeeded, largest := 0, projection.Generation(0)
	written.Range(func(k, _ any) bool {
		succeeded++
		largest = max(largest, k.(projection.Generation))
		return true
	})
	for _, info := range infos {
		if _, ok := written.Load(info.Generation); !ok && info.Generation != initial {
			t.Errorf("generation %d is stored, but no Replace wrote it: a Replace writes the generation it was given and no other", info.Generation)
		}
	}
	if len(infos) != 1+succeeded {
		t.Errorf("%d generations stored, want %d (every Replace that was not stale writes one)", len(infos), 1+succeeded)
	}
	if active[0] != largest {
		t.Errorf("the active generation is %d, want the largest written, %d", active[0], largest)
	}
	stale.Range(func(k, _ any) bool {
		if g := k.(projection.Generation); g > active[0] {
			t.Errorf("Replace with generation %d was refused as stale, but no larger generation is active (%d)", g, active[0])
		}
		return true
	})
	i, ok := written.Load(active[0])
	if !ok {
		t.Fatalf("the active generation %d is none that Replace wrote", active[0])
	}
	checkSnapshot(t, ctx, h.Second, frank, active[0], sets[i.(int)])
	t.Logf("%d checks of the active generation during the refreshes", checks.Load())
}

func (s *projectionSuite) reservationsIncrease(t *testing.T, env projectionBundle) {
	h, ctx := env.h, env.ctx
	var prev projection.Generation
	for i := range 20 {
		gen := mustReserve(t, ctx, h.pick(i))
		if gen <= prev {
			t.Fatalf("reservation %d is %d, not above the previous %d (from the other node)", i, gen, prev)
		}
		prev = gen
	}
	// Concurrent reservations are all distinct.
	var mu sync.Mutex
	seen := map[projection.Generation]bool{}
	var wg sync.WaitGroup
	for i := range 8 {
		st := h.pick(i)
		wg.Go(func() {
			for range 10 {
				gen, err := st.Reserve(ctx)
				mu.Lock()
				if err != nil || seen[gen] || gen <= prev {
					t.Errorf("a concurrent Reserve returned %d, %v: want a new number above %d", gen, err, prev)
				}
				seen[gen] = true
				mu.Unlock()
			}
		})
	}
	wg.Wait()
}

// olderReservationRefused is the rule that keeps a revoked grant revoked:
// a refresh that reserved earlier (its fetch started earlier) and flips
// later is refused, and the later-fetched answer stays.
func (s *projectionSuite) olderReservationRefused(t *testing.T, env projectionBundle) {
	h, ctx := env.h, env.ctx
	olive, pat := user("olive"), user("pat")
	withGrant := grantSet("doc", "o", 3, 1) // fetched before the revocation
	revoked := sortedGrants(withGrant)[1:]  // fetched after it
	older := mustReserve(t, ctx, h.Store)   // the slow refresh's fetch starts
	newer := mustReserve(t, ctx, h.Second)  // another node's starts later
	if err := h.Second.Replace(ctx, olive, newer, revoked); err != nil {
		t.Fatalf("Replace with the newer generation: %v", err)
	}
	err := h.Store.Replace(ctx, olive, older, withGrant)
	if !errors.Is(err, projection.ErrStale) {
		t.Fatalf("Replace with a generation reserved before the active one: err = %v, want ErrStale", err)
	}
	if errors.Is(err, projection.ErrInvalidGeneration) {
		t.Errorf("a stale Replace also reports ErrInvalidGeneration: %v", err)
	}
	checkSnapshot(t, ctx, h.Store, olive, newer, revoked)
	if _, found := mustMask(t, ctx, h.Second, olive, "doc", withGrant[0].ResourceID); found {
		t.Error("the revoked grant came back")
	}
	if got := generationNumbers(mustGenerations(t, ctx, h.Store, olive)); !slices.Equal(got, []projection.Generation{newer}) {
		t.Errorf("after a stale Replace the generations are %v, want only %d: a stale Replace writes nothing", got, newer)
	}
	// Still stale after a sweep, and after yet another refresh.
	mustSweep(t, ctx, h.Store)
	newest := mustReplace(t, ctx, h.Store, olive, revoked)
	if err := h.Second.Replace(ctx, olive, older, withGrant); !errors.Is(err, projection.ErrStale) {
		t.Errorf("the old generation again, after a sweep and a newer refresh: err = %v, want ErrStale", err)
	}
	checkSnapshot(t, ctx, h.Second, olive, newest, revoked)
	// The order is per subject: the older number is fine for a subject
	// nothing newer was written for.
	if err := h.Store.Replace(ctx, pat, older, withGrant); err != nil {
		t.Errorf("an older reservation for another subject: %v", err)
	}
	checkSnapshot(t, ctx, h.Second, pat, older, withGrant)
}

// flipsInAnyOrder reserves generations, then flips them concurrently in a
// scrambled order from both nodes: the active generation only ever grows,
// ends at the largest, and each Replace either wrote or was stale.
func (s *projectionSuite) flipsInAnyOrder(t *testing.T, env projectionBundle) {
	h, ctx := env.h, env.ctx
	quinn := user("quinn")
	const n = 24
	gens := make([]projection.Generation, n)
	sets := make(map[projection.Generation][]projection.Grant, n)
	for i := range gens {
		gens[i] = mustReserve(t, ctx, h.pick(i))
		sets[gens[i]] = append(grantSet("doc", fmt.Sprintf("q%02d", i), 3, uint64(i)),
			projection.Grant{ResourceType: "doc", ResourceID: "common", Mask: projection.Mask(i + 1)})
	}
	// Largest first, then the rest interleaved: most flips arrive late.
	order := []int{n - 1}
	for i := range n - 1 {
		if i%2 == 0 {
			order = append(order, i/2)
		} else {
			order = append(order, n-2-i/2)
		}
	}
	var (
		stop   atomic.Bool
		wg, cw sync.WaitGroup
		mu     sync.Mutex
		fails  []string
	)
	fail := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		if len(fails) < 10 {
			fails = append(fails, fmt.Sprintf(format, args...))
		}
	}
	for c := range 2 {
		st := h.pick(c)
		cw.Go(func() {
			var highest projection.Generation
			for !stop.Load() {
				snap, err := st.Snapshot(ctx, quinn)
				if errors.Is(err, projection.ErrNoProjection) {
					if highest != 0 {
						fail("the projection went absent after generation %d was active", highest)
						return
					}
					continue
				}
				if err != nil {
					fail("Snapshot during the flips: %v", err)
					return
				}
				if snap.Generation < highest {
					fail("the active generation went back from %d to %d", highest, snap.Generation)
					return
				}
				highest = snap.Generation
			}
		})
	}
	next := make(chan int, n)
	for _, i := range order {
		next <- i
	}
	close(next)
	var wrote, refused atomic.Int64
	for w := range 4 {
		st := h.pick(w)
		wg.Go(func() {
			for i := range next {
				err := st.Replace(ctx, quinn, gens[i], sets[gens[i]])
				switch {
				case errors.Is(err, projection.ErrStale):
					refused.Add(1)
				case err != nil:
					fail("Replace(generation %d): %v", gens[i], err)
				default:
					wrote.Add(1)
				}
			}
		})
	}
	wg.Wait()
	stop.Store(true)
	cw.Wait()
	for _, f := range fails {
		t.Error(f)
	}
	top := gens[n-1]
	checkSnapshot(t, ctx, h.Second, quinn, top, sets[top])
	infos := mustGenerations(t, ctx, h.Store, quinn)
	if got := activeOf(infos); !slices.Equal(got, []projection.Generation{top}) {
		t.Errorf("active generations %v, want only the largest, %d", got, top)
	}
	if int64(len(infos)) != wrote.Load() || wrote.Load()+refused.Load() != n {
		t.Errorf("%d generations stored, %d Replace calls wrote and %d were stale, of %d", len(infos), wrote.Load(), refused.Load(), n)
	}
	if refused.Load() == 0 {
		t.Errorf("no Replace was stale although the largest generation flipped first")
	}
}
