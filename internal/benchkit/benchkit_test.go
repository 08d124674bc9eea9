package benchkit

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestStatOf_MedianOfOddAndEvenCounts(t *testing.T) {
	if s := StatOf([]float64{3, 1, 2}); s.Median != 2 || s.Min != 1 || s.Max != 3 || s.N != 3 {
		t.Fatalf("StatOf(3,1,2) = %+v; want median 2, min 1, max 3", s)
	}
	if s := StatOf([]float64{4, 1, 2, 3}); s.Median != 2.5 {
		t.Fatalf("StatOf(4,1,2,3).Median = %v; want 2.5", s.Median)
	}
	if s := StatOf(nil); s != (Stat{}) {
		t.Fatalf("StatOf(nil) = %+v; want zero", s)
	}
}

func TestLoop_RunsEveryWorkerUntilTheBoundAndRecordsEachOp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, err := Loop(context.Background(), 3, 10*time.Millisecond, func(context.Context) error {
			time.Sleep(time.Millisecond)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		// Each worker starts ops at 0, 1, …, 10ms (the last one at the
		// bound itself): 11 each.
		if s.Ops != 33 || len(s.Latencies) != 33 || s.Elapsed != 11*time.Millisecond {
			t.Fatalf("Loop = %d ops, %d latencies in %v; want 33 and 33 in 11ms", s.Ops, len(s.Latencies), s.Elapsed)
		}
		if s.Rate() != 3000 || s.Quantile(0.5) != time.Millisecond {
			t.Fatalf("rate %v, p50 %v; want 3000/s and 1ms", s.Rate(), s.Quantile(0.5))
		}
	})
}

func TestLoop_StopsAtTheFirstError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		boom := errors.New("boom")
		n := 0
		_, err := Loop(context.Background(), 1, time.Minute, func(context.Context) error {
			n++
			time.Sleep(time.Millisecond)
			if n == 5 {
				return boom
			}
			return nil
		})
		if !errors.Is(err, boom) || n != 5 {
			t.Fatalf("Loop = %v after %d ops; want boom after 5", err, n)
		}
	})
}

func TestCounter_SteadyRateLeavesOutTheStartUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := NewCounter(100)
		start := time.Now()
		fed := make(chan struct{})
		go func() {
			defer close(fed)
			time.Sleep(time.Second) // start-up
			for i := range 10 {
				if i > 0 {
					time.Sleep(10 * time.Millisecond)
				}
				c.Add(10)
			}
		}()
		defer func() { <-fed }()
		s, err := c.AwaitSteady(context.Background(), start, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		// First count at 1s (10 rows), the last at 1.09s: 90 rows in 90ms.
		if s.Ops != 90 || s.Elapsed != 90*time.Millisecond {
			t.Fatalf("steady sample %d in %v; want 90 in 90ms", s.Ops, s.Elapsed)
		}
		all, _ := c.Await(context.Background(), start, time.Minute)
		if all.Ops != 100 || all.Elapsed != 1090*time.Millisecond {
			t.Fatalf("whole sample %d in %v; want 100 in 1.09s", all.Ops, all.Elapsed)
		}
	})
}

func TestCounter_SteadyBoundCountsFromTheFirstCount(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := NewCounter(1000)
		start := time.Now()
		fed := make(chan struct{})
		go func() {
			defer close(fed)
			time.Sleep(5 * time.Second) // a slow start, beyond the bound
			for range 30 {
				c.Add(1)
				time.Sleep(100 * time.Millisecond)
			}
		}()
		defer func() { <-fed }()
		s, err := c.AwaitSteady(context.Background(), start, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		// Counts at 5.0s, 5.1s, …: the bound ends at 6.0s, with the
		// count made at that instant or not; 9 or 10 after the first.
		if s.Ops < 9 || s.Ops > 10 || s.Elapsed != time.Duration(s.Ops)*100*time.Millisecond {
			t.Fatalf("steady sample %d in %v; want the second after the first count", s.Ops, s.Elapsed)
		}
	})
}

func TestCounter_SteadyGivesUpWhenNothingStarts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := NewCounter(10)
		s, err := c.AwaitSteady(context.Background(), time.Now(), time.Second)
		if err != nil || s.Ops != 0 || s.Elapsed != StartLimit {
			t.Fatalf("AwaitSteady = %d in %v, %v; want nothing after StartLimit", s.Ops, s.Elapsed, err)
		}
	})
}

func TestCounter_AwaitStopsAtTheBound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := NewCounter(1000)
		start := time.Now()
		c.Add(5)
		s, err := c.Await(context.Background(), start, time.Second)
		if err != nil || s.Ops != 5 || s.Elapsed != time.Second {
			t.Fatalf("Await = %d in %v, %v; want 5 in 1s", s.Ops, s.Elapsed, err)
		}
	})
}

// fixed is a system whose runs take the given rates in turn, and which
// records the order the systems ran in.
func fixed(name string, order *[]string, rates ...float64) System {
	i := 0
	return System{Name: name, Run: func(context.Context) (Sample, error) {
		*order = append(*order, name)
		r := rates[i%len(rates)]
		i++
		return Sample{Ops: int64(r), Elapsed: time.Second}, nil
	}}
}

func TestAlternate_RunsEachRoundInItsOrderAndTakesEachRatioWithinARound(t *testing.T) {
	var order []string
	c := Cell{Group: "g", Name: "n", Unit: "ops/s",
		System: []System{fixed("a", &order, 100, 200, 300), fixed("b", &order, 100, 100, 100), fixed("c", &order, 50)},
		Ratios: []Ratio{{Of: "a", Over: "b", Kind: Throughput, Goal: 1.5}, {Of: "a", Over: "b", Kind: Cost, Goal: 1.1}},
	}
	res, err := Alternate(context.Background(), c, 3)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"a", "b", "c", "b", "a", "c", "c", "a", "b"}; !slices.Equal(order, want) {
		t.Fatalf("ran %v; want the rounds in RoundOrder's orders: %v", order, want)
	}
	if r := res.Ratios[0]; r.Median != 2 || r.Min != 1 || r.Max != 3 {
		t.Fatalf("throughput ratio %+v; want median 2 of the rounds' 1, 2, 3", r)
	}
	if r := res.Ratios[1]; r.Median != 0.5 || r.Max != 1 {
		t.Fatalf("cost ratio %+v; want median 0.5 (time per op is the inverse)", r)
	}
	if !res.Met(0) || !res.Met(1) {
		t.Fatal("median 2 ≥ 1.5 and 0.5 ≤ 1.1 must both count as met")
	}
	if s := res.Rates["a"]; s.Median != 200 {
		t.Fatalf("rate of a %+v; want median 200", s)
	}
	c.Rounds = 4
	if res, err := Alternate(context.Background(), c, 3); err != nil || res.Ratios[0].N != 4 {
		t.Fatalf("a cell's own Rounds (4) must replace the run's (3): %d alternations, %v", res.Ratios[0].N, err)
	}
}

func TestRoundOrder_EachSystemStartsOnceAndFollowsDifferentNeighbours(t *testing.T) {
	if got := RoundOrder(0, 3); got != nil {
		t.Fatalf("RoundOrder(0, 3) = %v; want no systems to run", got)
	}
	for _, n := range []int{1, 2, 3, 4, 5, 8, 9} {
		first := map[int]int{}
		before := make([]map[int]bool, n) // the systems each ran right after
		for i := range before {
			before[i] = map[int]bool{}
		}
		for round := range 2 * n {
			order := RoundOrder(n, round)
			for i, v := range slices.Sorted(slices.Values(order)) {
				if v != i || len(order) != n {
					t.Fatalf("n %d round %d: order %v does not run every system once", n, round, order)
				}
			}
			first[order[0]]++
			for k := 1; k < n; k++ {
				before[order[k]][order[k-1]] = true
			}
		}
		for i := range n {
			if first[i] != 2 {
				t.Errorf("n %d: system %d ran first %d times in %d rounds; want 2", n, i, first[i], 2*n)
			}
			// With three systems or more, a system that always ran after
			// the same one would carry whatever that one leaves behind.
			if n >= 3 && len(before[i]) < 2 {
				t.Errorf("n %d: system %d always ran after %v", n, i, before[i])
			}
		}
	}
}

func TestAlternate_RefusesUnknownSystemsAndRunsThatDidNothing(t *testing.T) {
	var order []string
	_, err := Alternate(context.Background(), Cell{System: []System{fixed("a", &order, 1)}, Ratios: []Ratio{{Of: "a", Over: "x"}}}, 1)
	if err == nil || !strings.Contains(err.Error(), `unknown system "x"`) {
		t.Fatalf("err = %v; want the unknown system named", err)
	}
	_, err = Alternate(context.Background(), Cell{System: []System{fixed("a", &order, 0)}}, 1)
	if err == nil || !strings.Contains(err.Error(), "did nothing") {
		t.Fatalf("err = %v; want an empty run refused", err)
	}
	if _, err := Alternate(context.Background(), Cell{}, 0); err == nil {
		t.Fatal("0 rounds accepted")
	}
}

func TestReport_PrintsRatesRatiosGoalsAndMisses(t *testing.T) {
	var order []string
	c := Cell{Group: "locks", Name: "Redis", Unit: "ops/s",
		System: []System{fixed("baton", &order, 90), fixed("raw", &order, 100)},
		Ratios: []Ratio{{Of: "baton", Over: "raw", Kind: Cost, Goal: 1.10}}}
	res, err := Alternate(context.Background(), c, 1)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	Report{Machine: Machine{CPU: "cpu", Cores: 2}, Rounds: 1, Bound: time.Second, Settings: []string{"setting x"}, Cells: []CellResult{res}}.Print(&b)
	out := b.String()
	for _, want := range []string{"- setting x", "| locks, Redis | baton | 90.0 ops/s | 90.0–90.0 | 1 |", "baton ÷ raw (time per op) | 1.111× | 1.111–1.111 | 1 |", "≤ 1.10×", "**missed**"} {
		if !strings.Contains(out, want) {
			t.Fatalf("report lacks %q:\n%s", want, out)
		}
	}
}

func TestHuman_ThreeSignificantDigits(t *testing.T) {
	for v, want := range map[float64]string{5.678: "5.68", 56.78: "56.8", 567.8: "568", 5678: "5.68 k", 123456: "123 k", 3.2e6: "3.20 M"} {
		if got := Human(v); got != want {
			t.Errorf("Human(%v) = %q; want %q", v, got, want)
		}
	}
}

func TestStopwatch_TimesEachKeyFromItsStartToItsStopOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := NewStopwatch[int]()
		w.Start(1)
		w.Start(2)
		w.Start(3)
		time.Sleep(5 * time.Millisecond)
		w.Forget(2)
		if !w.Stop(1) || w.Stop(2) || w.Stop(4) {
			t.Fatal("Stop reports a key that was not started, or misses one that was")
		}
		time.Sleep(5 * time.Millisecond)
		w.Stop(3)
		if w.Stop(3) {
			t.Fatal("a key stopped twice")
		}
		if got := w.Latencies(); !slices.Equal(got, []time.Duration{5 * time.Millisecond, 10 * time.Millisecond}) {
			t.Fatalf("latencies %v; want 5ms and 10ms, and none for the forgotten key", got)
		}
	})
}

func TestBound_ExactlyOneOfCountAndDuration(t *testing.T) {
	for b, ok := range map[Bound]bool{
		{Count: 10}: true, {Duration: time.Second}: true,
		{}: false, {Count: 10, Duration: time.Second}: false, {Count: -1}: false, {Duration: -time.Second}: false,
	} {
		if err := b.validate(); (err == nil) != ok {
			t.Errorf("Bound %+v: %v; want accepted %v", b, err, ok)
		}
	}
	if _, err := (&WorkRows{}).LiveBurnDown(1, 1, Bound{}); err == nil {
		t.Error("LiveBurnDown accepted no bound")
	}
	if _, err := (&Outbox{}).LiveRelay(nil, 1, 1, Bound{Duration: time.Second}); err == nil {
		t.Error("LiveRelay for a duration accepted no producers")
	}
}
