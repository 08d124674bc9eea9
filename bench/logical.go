package main

import (
	"context"
	"fmt"
	"time"

	"github.com/baton-go/baton/internal/benchkit"
	"github.com/baton-go/baton/internal/testenv"
)

// logicalProducers is the producer count of the logical group's producer
// cost cell.
const logicalProducers = 8

func logicalWhere(p plan) string {
	if p.logicalURL != "" {
		return "--pg-logical"
	}
	return "a throwaway server started from this machine's binaries, fsync off"
}

// logicalCells compares the outbox read from the log with the walk, on a
// server with wal_level = logical: --pg-logical, or a throwaway one.
func logicalCells(ctx context.Context, _ *benchkit.Env, p plan) ([]benchkit.Cell, error) {
	url := p.logicalURL
	if url == "" {
		u, stop, err := testenv.ThrowawayPostgres(testenv.LogicalSettings...)
		if err != nil {
			return nil, fmt.Errorf("no server with wal_level = logical: pass --pg-logical, or install the PostgreSQL binaries: %w", err)
		}
		*p.closers = append(*p.closers, func(context.Context) error { return stop() })
		url = u
	}
	var pools [2]*benchkit.Env
	for i := range pools {
		env, err := benchkit.Open(ctx, url, "")
		if err != nil {
			return nil, err
		}
		*p.closers = append(*p.closers, env.Close)
		pools[i] = env
	}
	walkPool, err := pools[0].Pool(ctx, logicalProducers+4)
	if err != nil {
		return nil, err
	}
	logPool, err := pools[1].Pool(ctx, logicalProducers+4)
	if err != nil {
		return nil, err
	}
	l, err := benchkit.NewLogical(ctx, walkPool, logPool)
	if err != nil {
		return nil, err
	}
	*p.closers = append(*p.closers, l.Close)
	*p.settings = append(*p.settings, l.CPUSetting())

	var cells []benchkit.Cell
	for _, batch := range p.relayBatches {
		log, walk := l.Relay(true, batch, p.logicalEntries, p.bound), l.Relay(false, batch, p.logicalEntries, p.bound)
		cells = append(cells, benchkit.Cell{
			Group: "logical relay", Name: fmt.Sprintf("batch %d", batch), Unit: "entries/s",
			System: []benchkit.System{log, walk},
			Ratios: []benchkit.Ratio{{Of: log.Name, Over: walk.Name, Kind: benchkit.Throughput, Goal: 0.8}},
		})
	}
	log, walk := l.Enqueue(true, logicalProducers, p.bound), l.Enqueue(false, logicalProducers, p.bound)
	cells = append(cells, benchkit.Cell{
		Group: "logical enqueue", Name: fmt.Sprintf("%d producers", logicalProducers), Unit: "tx/s",
		System: []benchkit.System{log, walk},
		Ratios: []benchkit.Ratio{{Of: log.Name, Over: walk.Name, Kind: benchkit.Cost, Goal: 1.05}},
	})
	every := 5 * time.Millisecond
	cells = append(cells, benchkit.Cell{
		Group: "logical latency", Name: "one entry every 5ms", Unit: "entries/s",
		System: []benchkit.System{l.Latency(true, every, 4*p.bound), l.Latency(false, every, 4*p.bound)},
	})
	return cells, nil
}
