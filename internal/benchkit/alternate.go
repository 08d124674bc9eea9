package benchkit

import (
	"context"
	"fmt"
	"slices"
)

// System is one contender of a cell. Prepare (optional) readies it before
// each run, outside the measurement (truncating a table, resetting a
// cursor); Run does one bounded run and returns its sample.
type System struct {
	Name    string
	Prepare func(ctx context.Context) error
	Run     func(ctx context.Context) (Sample, error)
}

// Kind says how a ratio reads.
type Kind int

const (
	// Throughput: rate of Of over rate of Over; higher is better for Of.
	Throughput Kind = iota
	// Cost: time per op of Of over that of Over (the inverse rate ratio);
	// lower is better for Of.
	Cost
)

// Ratio compares two systems of a cell, round by round.
type Ratio struct {
	Of, Over string // system names
	Kind     Kind
	// Goal is the bound the median should meet (≥ for Throughput, ≤ for
	// Cost); 0 for none.
	Goal float64
}

// Cell is one line of the comparison: systems run alternately for Rounds
// rounds, each round starting with a different system.
type Cell struct {
	Group  string // e.g. "outbox relay"
	Name   string // e.g. "batch 100"
	Unit   string // of the rates, e.g. "entries/s"
	System []System
	Ratios []Ratio
	// Rounds, if set, replaces the run's number of alternations for this
	// cell: cheap cells can afford more, shorter ones, which the noise of a
	// shared machine averages out better.
	Rounds int
}

// Stat is the median, min and max of a list of values.
type Stat struct {
	Median, Min, Max float64
	N                int
}

// StatOf returns the Stat of values (zero for none).
func StatOf(values []float64) Stat {
	if len(values) == 0 {
		return Stat{}
	}
	v := slices.Clone(values)
	slices.Sort(v)
	med := v[len(v)/2]
	if len(v)%2 == 0 {
		med = (v[len(v)/2-1] + v[len(v)/2]) / 2
	}
	return Stat{Median: med, Min: v[0], Max: v[len(v)-1], N: len(v)}
}

// CellResult is a cell's measurements.
type CellResult struct {
	Cell    Cell
	Samples map[string][]Sample // per system, one per round
	Rates   map[string]Stat     // per system
	Ratios  []Stat              // per Cell.Ratios entry, of the per-round ratios
}

// Met reports whether ratio i's median meets its goal (true when it has
// none).
func (r CellResult) Met(i int) bool {
	g := r.Cell.Ratios[i]
	switch {
	case g.Goal == 0:
		return true
	case g.Kind == Throughput:
		return r.Ratios[i].Median >= g.Goal
	default:
		return r.Ratios[i].Median <= g.Goal
	}
}

// Alternate runs the cell: rounds rounds, in each every system once, in
// the order RoundOrder gives, so that none always runs first or after the
// same neighbour. Each ratio is computed within a round (both
// systems measured under the same load) and summarised over the rounds.
func Alternate(ctx context.Context, c Cell, rounds int) (CellResult, error) {
	if c.Rounds > 0 {
		rounds = c.Rounds
	}
	if rounds < 1 {
		return CellResult{}, fmt.Errorf("benchkit: %d rounds; at least 1", rounds)
	}
	byName := map[string]int{}
	for i, s := range c.System {
		if s.Run == nil {
			return CellResult{}, fmt.Errorf("benchkit: cell %s %s: system %q has no Run", c.Group, c.Name, s.Name)
		}
		byName[s.Name] = i
	}
	for _, r := range c.Ratios {
		if _, ok := byName[r.Of]; !ok {
			return CellResult{}, fmt.Errorf("benchkit: cell %s %s: ratio of unknown system %q", c.Group, c.Name, r.Of)
		}
		if _, ok := byName[r.Over]; !ok {
			return CellResult{}, fmt.Errorf("benchkit: cell %s %s: ratio over unknown system %q", c.Group, c.Name, r.Over)
		}
	}
	res := CellResult{Cell: c, Samples: map[string][]Sample{}, Rates: map[string]Stat{}}
	perRound := make([][]float64, len(c.Ratios))
	for round := range rounds {
		rates := map[string]float64{}
		for _, i := range RoundOrder(len(c.System), round) {
			s := c.System[i]
			if s.Prepare != nil {
				if err := s.Prepare(ctx); err != nil {
					return CellResult{}, fmt.Errorf("%s %s, %s: prepare: %w", c.Group, c.Name, s.Name, err)
				}
			}
			sample, err := s.Run(ctx)
			if err != nil {
				return CellResult{}, fmt.Errorf("%s %s, %s: %w", c.Group, c.Name, s.Name, err)
			}
			if sample.Ops == 0 {
				return CellResult{}, fmt.Errorf("%s %s, %s: the run did nothing in %v", c.Group, c.Name, s.Name, sample.Elapsed)
			}
			res.Samples[s.Name] = append(res.Samples[s.Name], sample)
			rates[s.Name] = sample.Rate()
		}
		for i, r := range c.Ratios {
			v := rates[r.Of] / rates[r.Over]
			if r.Kind == Cost {
				v = rates[r.Over] / rates[r.Of]
			}
			perRound[i] = append(perRound[i], v)
		}
	}
	for name, samples := range res.Samples {
		rates := make([]float64, len(samples))
		for i, s := range samples {
			rates[i] = s.Rate()
		}
		res.Rates[name] = StatOf(rates)
	}
	for i := range c.Ratios {
		res.Ratios = append(res.Ratios, StatOf(perRound[i]))
	}
	return res, nil
}

// RoundOrder is the order in which round runs n systems: it starts with
// system round mod n, so that over n rounds each system runs first once,
// and steps through the systems by a stride coprime with n that changes
// from round to round. A plain rotation (stride 1 every round) would keep
// the cyclic order, and every system would run after the same neighbour in
// every round it does not start: whatever one system leaves behind (a
// notification queue, a checkpoint it triggered, a connection still
// closing) would always be charged to the same other system.
func RoundOrder(n, round int) []int {
	if n <= 0 {
		return nil
	}
	var strides []int
	for s := 1; s < n; s++ {
		if gcd(s, n) == 1 {
			strides = append(strides, s)
		}
	}
	if len(strides) == 0 {
		strides = []int{1}
	}
	start, stride := round%n, strides[round%len(strides)]
	order := make([]int, n)
	for k := range order {
		order[k] = (start + k*stride) % n
	}
	return order
}

func gcd(a, b int) int {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}
