// Command bench measures baton side by side with what a user would use
// instead, on the same PostgreSQL and Redis in one run: River for a queue,
// watermill-sql for an outbox relay and its publisher, bsm/redislock for a
// Redis lock, and the bare statements each of baton's parts stands on. It
// prints a Markdown table of rates and ratios; each ratio is the median of
// several alternations, with its min and max.
//
// It is a module of its own, so that the peers never enter baton's
// go.mod. From the repository root:
//
//	go -C bench run . all            # every cell, 5 alternations (a few minutes)
//	go -C bench run . --quick all    # one alternation per cell (well under 2 minutes)
//	go -C bench run . workrows       # one group: relay, enqueue, workrows, locks, wakeup or logical
//
// (or cd bench && go run . all). The servers default to PostgreSQL at
// 127.0.0.1:5432 as user postgres and Redis at 127.0.0.1:6379; --pg and
// --redis, or BATON_BENCH_PG and BATON_BENCH_REDIS, point elsewhere. Each
// run works in a schema and a Redis key prefix of its own and removes them
// at the end; it changes no server setting (its sessions set
// synchronous_commit=on for themselves). The logical group (the outbox read
// from the log beside the walk) needs wal_level = logical: --pg-logical or
// BATON_BENCH_PG_LOGICAL names such a server; without one it starts a
// throwaway server from the PostgreSQL binaries on this machine.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"runtime/pprof"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/riverqueue/river"

	"github.com/baton-go/baton/backends/bunstore"
	"github.com/baton-go/baton/backends/pgxstore"
	"github.com/baton-go/baton/core/outbox"
	"github.com/baton-go/baton/core/workrow"
	"github.com/baton-go/baton/internal/benchkit"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// groups are the commands besides all, in the order all runs them.
var groups = []string{"relay", "enqueue", "workrows", "locks", "wakeup", "logical"}

// plan is the size of one invocation.
type plan struct {
	rounds        int
	bound         time.Duration // of one run of one system
	workBound     time.Duration // of one burn-down
	relayEntries  int
	wmEntries     int
	workRows      int
	relayBatches  []int
	producers     []int
	handlers      []int
	workBatches   []int
	riverSettings riverSettings
	// wakeRates are the commit rates of the wake-up cells, each measured
	// for at least wakeCommits commits, in wakeRounds alternations.
	wakeRates   []float64
	wakeCommits int
	wakeRounds  int
	// logicalURL is a server with wal_level = logical ("" starts one);
	// logicalEntries the fresh entries of each logical relay run.
	logicalURL     string
	logicalEntries int
	// closers run when the measurement ends, after every cell.
	closers *[]func(context.Context) error
	// settings are lines for the report that a group knows only once it
	// is set up.
	settings *[]string
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	pgURL := fs.String("pg", envOr("BATON_BENCH_PG", benchkit.DefaultPostgresURL), "PostgreSQL URL (env BATON_BENCH_PG)")
	redisAddr := fs.String("redis", envOr("BATON_BENCH_REDIS", benchkit.DefaultRedisAddr), "Redis address (env BATON_BENCH_REDIS)")
	pgLogical := fs.String("pg-logical", os.Getenv("BATON_BENCH_PG_LOGICAL"), "PostgreSQL URL of a server with wal_level = logical, for the logical group (env BATON_BENCH_PG_LOGICAL; default: start a throwaway one)")
	quick := fs.Bool("quick", false, "one alternation per cell and short runs: a smoke test and a first look")
	rounds := fs.Int("rounds", 0, "alternations per cell (default 5; 1 with --quick)")
	bound := fs.Duration("time", 0, "bound of one run of one system (default 1s; 250ms with --quick)")
	cooldown := fs.Duration("river-fetch-cooldown", river.FetchCooldownMin, "River's FetchCooldown")
	poll := fs.Duration("river-fetch-poll-interval", river.FetchPollIntervalMin, "River's FetchPollInterval")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the whole run to this file (go tool pprof reads it)")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: bench [flags] all|%s\n", strings.Join(groups, "|"))
		fs.PrintDefaults()
	}
	// Flags may come before or after the command.
	if err := fs.Parse(args); err != nil {
		return 2
	}
	rest := fs.Args()
	if len(rest) == 0 {
		fs.Usage()
		return 2
	}
	cmd := rest[0]
	if err := fs.Parse(rest[1:]); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "bench: unexpected arguments after %q: %v\n", cmd, fs.Args())
		return 2
	}
	var selected []string
	switch {
	case cmd == "all":
		selected = groups
	case slices.Contains(groups, cmd):
		selected = []string{cmd}
	default:
		fmt.Fprintf(stderr, "bench: unknown command %q\n", cmd)
		fs.Usage()
		return 2
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			fmt.Fprintf(stderr, "bench: --cpuprofile: %v\n", err)
			return 2
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintf(stderr, "bench: --cpuprofile: %v\n", err)
			return 2
		}
		defer pprof.StopCPUProfile()
	}

	p := plan{
		rounds: 5, bound: time.Second, relayEntries: 300_000, wmEntries: 100_000, workRows: 30_000,
		relayBatches: []int{100, 1000}, producers: []int{1, 8, 32}, handlers: []int{1, 16, 100}, workBatches: []int{20, 100},
		riverSettings: riverSettings{FetchCooldown: *cooldown, FetchPollInterval: *poll},
		wakeRates:     []float64{10, 500}, wakeCommits: 70, wakeRounds: 3,
		logicalURL: *pgLogical, logicalEntries: 60_000, closers: new([]func(context.Context) error),
		settings: new([]string),
	}
	if *quick {
		p.rounds, p.bound, p.relayEntries, p.wmEntries, p.workRows = 1, 250*time.Millisecond, 50_000, 20_000, 10_000
		p.wakeCommits, p.wakeRounds = 30, 1
		p.logicalEntries = 20_000
	}
	if *rounds > 0 {
		p.rounds = *rounds
	}
	if *bound > 0 {
		p.bound = *bound
	}
	p.workBound = 2 * p.bound
	switch {
	case *rounds < 0:
		fmt.Fprintf(stderr, "bench: --rounds is %d; it must be at least 1\n", *rounds)
		return 2
	case *bound < 0:
		fmt.Fprintf(stderr, "bench: --time is %v; it must be positive\n", *bound)
		return 2
	}

	// Interrupted or terminated, the run still drops its schema and keys.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	report, err := measure(ctx, p, selected, *pgURL, *redisAddr, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "bench: %v\n", err)
		return 1
	}
	report.Print(stdout)
	return 0
}

func measure(ctx context.Context, p plan, selected []string, pgURL, redisAddr string, log io.Writer) (_ benchkit.Report, err error) {
	began := time.Now()
	needRedis := slices.Contains(selected, "locks")
	if !needRedis {
		redisAddr = ""
	}
	env, err := benchkit.Open(ctx, pgURL, redisAddr)
	if err != nil {
		return benchkit.Report{}, err
	}
	defer func() {
		if cerr := env.Close(context.WithoutCancel(ctx)); cerr != nil {
			err = errors.Join(err, fmt.Errorf("clean up: %w", cerr))
		}
	}()
	defer func() {
		closers := *p.closers
		for i := len(closers) - 1; i >= 0; i-- {
			if cerr := closers[i](context.WithoutCancel(ctx)); cerr != nil {
				err = errors.Join(err, fmt.Errorf("clean up: %w", cerr))
			}
		}
	}()
	machine, err := benchkit.Describe(ctx, env.Admin(), env.Redis())
	if err != nil {
		return benchkit.Report{}, err
	}
	if machine.Redis == "" {
		machine.Redis = "not used"
	}
	report := benchkit.Report{Machine: machine, Rounds: p.rounds, Bound: p.bound, Settings: settings(p, env, selected)}
	fmt.Fprintf(log, "bench: schema %s; %s\n", env.Schema, machine)

	cells := map[string]func(ctx context.Context, env *benchkit.Env, p plan) ([]benchkit.Cell, error){
		"relay": relayCells, "enqueue": enqueueCells, "workrows": workRowCells, "locks": lockCells, "wakeup": wakeCells, "logical": logicalCells,
	}
	for _, g := range selected {
		t0 := time.Now()
		cs, err := cells[g](ctx, env, p)
		if err != nil {
			return benchkit.Report{}, fmt.Errorf("%s: set up: %w", g, err)
		}
		fmt.Fprintf(log, "bench: %s set up in %v\n", g, time.Since(t0).Round(time.Millisecond))
		for _, c := range cs {
			t0 := time.Now()
			res, err := benchkit.Alternate(ctx, c, p.rounds)
			if err != nil {
				return benchkit.Report{}, err
			}
			report.Cells = append(report.Cells, res)
			fmt.Fprintf(log, "bench: %s, %s: %v\n", c.Group, c.Name, time.Since(t0).Round(time.Millisecond))
		}
	}
	report.Settings = append(report.Settings, *p.settings...)
	report.Machine.LoadEnd = benchkit.LoadAverage()
	fmt.Fprintf(log, "bench: done in %v\n", time.Since(began).Round(time.Second))
	return report, nil
}

func settings(p plan, env *benchkit.Env, selected []string) []string {
	s := []string{
		fmt.Sprintf("versions: baton (this tree), %s", strings.Join(peerVersions(), ", ")),
		fmt.Sprintf("PostgreSQL: every session sets synchronous_commit=on; all tables in schema %s, dropped at the end", env.Schema),
		fmt.Sprintf("payload: the same %d-byte JSON document for every entry, message and enqueue", len(benchkit.Payload)),
	}
	for _, g := range selected {
		switch g {
		case "relay":
			s = append(s, fmt.Sprintf("outbox relay: %d entries in baton's outbox (driver and bare walk read the same table), %d messages in watermill's; "+
				"every run walks from the start; batches %v; pool of 4 connections", p.relayEntries, p.wmEntries, p.relayBatches),
				"baton driver: outbox.Driver, a no-op processor per lane (3 lanes), in-memory leader lock, retention off; "+
					"bare keyset walk: OutboxStore.Scan and one cursor upsert per batch",
				watermillSettings(), observedSettings)
		case "enqueue":
			s = append(s, fmt.Sprintf("enqueue: one producer transaction = BEGIN, INSERT a business row, the write, COMMIT; producers %v, pool of producers+2 connections; "+
				"plain INSERT: the same values into a table of the outbox's columns without its xid and walk index; "+
				"plain INSERT, outbox's indexes: into a table of the outbox's exact shape (xid column, primary key and (xid, id) index), without the dead-letter check; "+
				"the cells \"beside a leader\" run an outbox.Driver delivering what the producers commit, started before the measurement: listening (IdleDelay 5s) for Enqueue's signals, "+
				"or polling every 5ms (PollOnly) for an Enqueue with SignalDisabled; \"NOTIFY every commit\" is the insert with a NOTIFY in every transaction, without the idle gate", p.producers))
		case "workrows":
			s = append(s, fmt.Sprintf("work rows: %d fresh rows per run, no-op handler; handlers %v; baton: one Worker, one Run, Concurrency = the handler count, BatchSize %v, "+
				"IdleDelay 1ms; both systems on one pool of 10 connections; each burn-down's rate is taken from its first completion to the latest, "+
				"at most %v after the first, leaving out start-up (River's first completion comes about 65ms after Start)", p.workRows, p.handlers, p.workBatches, p.workBound),
				p.riverSettings.String(), observedSettings)
		case "wakeup":
			s = append(s, fmt.Sprintf("wake-ups: producers commit one entry (or one work row with WorkRows.Signal) per transaction at %v per second, at least %d commits per run, %d alternations; "+
				"one outbox.Driver (default IdleDelay %v, listening) or one Worker (default IdleDelay %v, listening, Concurrency 8, BatchSize 20); p50 and p99 are from the commit's return "+
				"to the processor's call (outbox) or the handler's start (work rows); the rate is the commits' pace", p.wakeRates, p.wakeCommits, p.wakeRounds, outbox.DefaultIdleDelay, workrow.DefaultIdleDelay))
		case "logical":
			s = append(s, fmt.Sprintf("logical: on a server with wal_level = logical (%s), the outbox read from the log (publication, pgoutput slot) beside one walked, "+
				"each in a schema of its own; relay: %d fresh entries per run, committed 100 per transaction before it, measured from the first delivery, batches %v; "+
				"producer cost: %d producers while each side's driver delivers; commit to delivery: one entry every 5ms, timed from just before its COMMIT "+
				"to its processor call, the walk polling every 10ms (IdleDelay)", logicalWhere(p), p.logicalEntries, p.relayBatches, logicalProducers))
		case "locks":
			s = append(s, fmt.Sprintf("locks: one goroutine, uncontended, acquire then release; Redis TTL 10s for both (baton's default); "+
				"PostgreSQL: baton's provider and the bare peer on one pool of 4 connections; %d alternations of %v each", lockRounds(p), p.bound/lockSplit))
		}
	}
	return s
}

func relayCells(ctx context.Context, env *benchkit.Env, p plan) ([]benchkit.Cell, error) {
	pool, err := env.Pool(ctx, 4)
	if err != nil {
		return nil, err
	}
	ob, err := benchkit.NewOutbox(ctx, pool)
	if err != nil {
		return nil, err
	}
	if err := ob.Load(ctx, p.relayEntries); err != nil {
		return nil, err
	}
	wm, err := newWatermillRelay(ctx, pool, "bench_relay", p.wmEntries)
	if err != nil {
		return nil, err
	}
	obs, stopObs, err := observed(sampleTenth)
	if err != nil {
		return nil, err
	}
	context.AfterFunc(ctx, stopObs)
	traced, stopTraced, err := observed(sampleAll)
	if err != nil {
		return nil, err
	}
	context.AfterFunc(ctx, stopTraced)
	var cells []benchkit.Cell
	for _, batch := range p.relayBatches {
		driver, bare, peer := ob.DriverWalk(batch, p.relayEntries, p.bound), ob.BareWalk(batch, p.relayEntries, p.bound), wm.walk(batch, p.wmEntries, p.bound)
		hooked := ob.ObservedDriverWalk(driver.Name+otelName, obs, batch, p.relayEntries, p.bound)
		allTraced := ob.ObservedDriverWalk(driver.Name+tracedName, traced, batch, p.relayEntries, p.bound)
		cells = append(cells, benchkit.Cell{
			Group: "outbox relay", Name: fmt.Sprintf("batch %d", batch), Unit: "entries/s",
			System: []benchkit.System{driver, bare, peer, hooked, allTraced},
			Ratios: []benchkit.Ratio{
				{Of: driver.Name, Over: bare.Name, Kind: benchkit.Throughput, Goal: 0.9},
				{Of: driver.Name, Over: peer.Name, Kind: benchkit.Throughput, Goal: 8},
				// What the hooks cost: the same driver, observed.
				{Of: hooked.Name, Over: driver.Name, Kind: benchkit.Cost, Goal: 1.05},
				{Of: allTraced.Name, Over: driver.Name, Kind: benchkit.Cost},
			},
		})
	}
	return cells, nil
}

func enqueueCells(ctx context.Context, env *benchkit.Env, p plan) ([]benchkit.Cell, error) {
	pool, err := env.Pool(ctx, slices.Max(p.producers)+2)
	if err != nil {
		return nil, err
	}
	ob, err := benchkit.NewOutbox(ctx, pool)
	if err != nil {
		return nil, err
	}
	quiet, err := pgxstore.NewOutboxStore(pool, pgxstore.OutboxStoreOptions{SignalDisabled: true})
	if err != nil {
		return nil, err
	}
	prod, err := benchkit.NewProducers(ctx, pool)
	if err != nil {
		return nil, err
	}
	const topic = "bench_enqueue"
	if err := initWatermillTopic(ctx, pool, topic); err != nil {
		return nil, err
	}
	// Every system's run starts from the same empty tables.
	empty := prod.Empty("watermill_" + topic)
	var cells []benchkit.Cell
	for _, n := range p.producers {
		baton, plain, peer := prod.Enqueue(n, p.bound), prod.PlainInsert(n, p.bound), watermillPublish(prod, topic, n, p.bound)
		shaped := prod.PlainWithWalkIndex(n, p.bound)
		listened := prod.EnqueueBeside("baton Enqueue beside a listening leader", ob.Store, true, n, p.bound, benchkit.SignalledEnqueue)
		polled := prod.EnqueueBeside("Enqueue, SignalDisabled, beside a polling leader", quiet, false, n, p.bound, benchkit.QuietEnqueue(quiet))
		naive := prod.EnqueueBeside("NOTIFY every commit beside a listening leader", ob.Store, true, n, p.bound, benchkit.NotifyEveryCommit)
		unsignalled := prod.Loop("Enqueue, SignalDisabled", n, p.bound, benchkit.QuietEnqueue(quiet))
		systems := []benchkit.System{baton, plain, peer, shaped, unsignalled, listened, polled, naive}
		for i := range systems {
			systems[i].Prepare = empty
		}
		cells = append(cells, benchkit.Cell{
			Group: "enqueue", Name: fmt.Sprintf("%d producers", n), Unit: "tx/s",
			System: systems,
			Ratios: []benchkit.Ratio{
				{Of: baton.Name, Over: plain.Name, Kind: benchkit.Cost, Goal: 1.10},
				{Of: baton.Name, Over: peer.Name, Kind: benchkit.Cost},
				// Where the cost over the plain INSERT goes: the outbox's
				// shape, then Enqueue's statement over it, of which the
				// dead-letter check (Enqueue without the signal's check
				// over the plain INSERT of the same shape).
				{Of: shaped.Name, Over: plain.Name, Kind: benchkit.Cost},
				{Of: baton.Name, Over: shaped.Name, Kind: benchkit.Cost},
				{Of: unsignalled.Name, Over: shaped.Name, Kind: benchkit.Cost},
				// What the signal's check costs a producer with nobody
				// listening; what signalling costs while a leader
				// listens, and what a NOTIFY in every commit would.
				{Of: baton.Name, Over: unsignalled.Name, Kind: benchkit.Cost, Goal: 1.10},
				{Of: listened.Name, Over: polled.Name, Kind: benchkit.Cost, Goal: 1.10},
				{Of: naive.Name, Over: polled.Name, Kind: benchkit.Cost},
			},
		})
	}
	return cells, nil
}

func wakeCells(ctx context.Context, env *benchkit.Env, p plan) ([]benchkit.Cell, error) {
	pool, err := env.Pool(ctx, 40)
	if err != nil {
		return nil, err
	}
	ob, err := benchkit.NewOutbox(ctx, pool)
	if err != nil {
		return nil, err
	}
	db := benchkit.Bun(pool)
	bunStore, err := bunstore.NewOutboxStore(ctx, db, bunstore.OutboxStoreOptions{})
	if err != nil {
		return nil, err
	}
	wr, err := benchkit.NewWakeRows(ctx, pool)
	if err != nil {
		return nil, err
	}
	var cells []benchkit.Cell
	for _, rate := range p.wakeRates {
		d := max(p.bound, time.Duration(float64(p.wakeCommits)/rate*float64(time.Second)))
		cells = append(cells, benchkit.Cell{
			Group: "wake-up, outbox commit → delivery", Name: fmt.Sprintf("%v entries/s", rate), Unit: "entries/s", Rounds: p.wakeRounds,
			System: []benchkit.System{
				benchkit.OutboxLatency("pgx", pool, ob.Store, benchkit.PgxEnqueue(pool), rate, d),
				benchkit.OutboxLatency("bun", pool, bunStore, benchkit.BunEnqueue(db), rate, d),
			},
		}, benchkit.Cell{
			Group: "wake-up, work row insert → handler start", Name: fmt.Sprintf("%v rows/s", rate), Unit: "rows/s", Rounds: p.wakeRounds,
			System: []benchkit.System{
				benchkit.WorkLatency("pgx", wr, wr.Pgx, wr.PgxInsert, rate, d),
				benchkit.WorkLatency("bun", wr, wr.Bun, wr.BunInsert, rate, d),
			},
		})
	}
	return cells, nil
}

func workRowCells(ctx context.Context, env *benchkit.Env, p plan) ([]benchkit.Cell, error) {
	pool, err := env.Pool(ctx, 10)
	if err != nil {
		return nil, err
	}
	wr, err := benchkit.NewWorkRows(ctx, pool)
	if err != nil {
		return nil, err
	}
	rq, err := newRiverQueue(ctx, pool, env.Schema, p.riverSettings)
	if err != nil {
		return nil, err
	}
	obs, stopObs, err := observed(sampleTenth) // work rows make no spans
	if err != nil {
		return nil, err
	}
	context.AfterFunc(ctx, stopObs)
	var cells []benchkit.Cell
	for _, h := range p.handlers {
		peer := rq.burnDown(h, p.workRows, p.workBound)
		c := benchkit.Cell{Group: "work rows", Name: fmt.Sprintf("%d handlers", h), Unit: "rows/s", System: []benchkit.System{peer}}
		goal := 1.5
		if h == 1 {
			goal = 0 // the goal is for concurrent handlers
		}
		var s benchkit.System
		for _, b := range p.workBatches {
			s = wr.BurnDown(h, b, p.workRows, p.workBound)
			c.System = append(c.System, s)
			c.Ratios = append(c.Ratios, benchkit.Ratio{Of: s.Name, Over: peer.Name, Kind: benchkit.Throughput, Goal: goal})
		}
		// What the hooks cost: the last batch size again, observed.
		b := p.workBatches[len(p.workBatches)-1]
		hooked := wr.ObservedBurnDown(s.Name+otelName, obs, h, b, p.workRows, p.workBound)
		c.System = append(c.System, hooked)
		c.Ratios = append(c.Ratios, benchkit.Ratio{Of: hooked.Name, Over: s.Name, Kind: benchkit.Cost, Goal: 1.05})
		cells = append(cells, c)
	}
	return cells, nil
}

func lockCells(ctx context.Context, env *benchkit.Env, p plan) ([]benchkit.Cell, error) {
	rdb := env.Redis()
	// Locks are cheap and their ratios small: four times the alternations,
	// each a quarter as long, average the machine's noise out better.
	d := p.bound / lockSplit
	baton, err := benchkit.RedisLock(rdb, env.Prefix, "lock", d)
	if err != nil {
		return nil, err
	}
	raw := benchkit.RawRedislock(rdb, env.Prefix+"raw", d)
	pool, err := env.Pool(ctx, 4)
	if err != nil {
		return nil, err
	}
	pgLock, err := benchkit.PostgresLock(ctx, pool, env.Schema, "lock", d)
	if err != nil {
		return nil, err
	}
	bare, err := benchkit.BareAdvisoryLock(ctx, pool, env.Schema, "lock", d)
	if err != nil {
		return nil, err
	}
	return []benchkit.Cell{
		{Group: "lock acquire + release", Name: "Redis", Unit: "ops/s", System: []benchkit.System{baton, raw}, Rounds: lockRounds(p),
			Ratios: []benchkit.Ratio{{Of: baton.Name, Over: raw.Name, Kind: benchkit.Cost, Goal: 1.10}}},
		{Group: "lock acquire + release", Name: "PostgreSQL", Unit: "ops/s", System: []benchkit.System{pgLock, bare}, Rounds: lockRounds(p),
			Ratios: []benchkit.Ratio{{Of: pgLock.Name, Over: bare.Name, Kind: benchkit.Cost, Goal: 1.2}}},
	}, nil
}

// lockSplit is how many shorter alternations a lock cell runs for each of
// the run's.
const lockSplit = 4

func lockRounds(p plan) int {
	if p.rounds == 1 {
		return 1 // --quick: a smoke test
	}
	return p.rounds * lockSplit
}

// Versions of the peers, from the build.
var riverVersion, watermillVersion, watermillSQLVersion, redislockVersion = depVersion("github.com/riverqueue/river"),
	depVersion("github.com/ThreeDotsLabs/watermill"), depVersion("github.com/ThreeDotsLabs/watermill-sql/v4"), depVersion("github.com/bsm/redislock")

func peerVersions() []string {
	return []string{"River " + riverVersion, "watermill " + watermillVersion, "watermill-sql " + watermillSQLVersion,
		"bsm/redislock " + redislockVersion, "pgx " + depVersion("github.com/jackc/pgx/v5"), "go-redis " + depVersion("github.com/redis/go-redis/v9")}
}

func depVersion(path string) string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	for _, d := range bi.Deps {
		if d.Path == path {
			return d.Version
		}
	}
	return "unknown"
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}
