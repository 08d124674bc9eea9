package main

import (
	"bytes"
	"context"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/baton-go/baton/cmd/baton/internal/ops"
	"github.com/baton-go/baton/internal/cli"
	"github.com/baton-go/baton/internal/testenv"
)

// benchSchema is the schema a bench run says it created.
var benchSchema = regexp.MustCompile(`schema "(baton_bench_[0-9a-f]+)" created`)

// schemaGone fails the test unless the bench run's output names its
// schema, says it dropped it, and the schema is gone.
func schemaGone(t *testing.T, pool *pgxpool.Pool, stdout string) {
	t.Helper()
	m := benchSchema.FindStringSubmatch(stdout)
	if m == nil {
		t.Fatalf("the output does not name the bench's schema:\n%s", stdout)
	}
	if !strings.Contains(stdout, `schema "`+m[1]+`" dropped`) {
		t.Errorf("the output does not say the schema was dropped:\n%s", stdout)
	}
	if exists, err := ops.SchemaExists(testContext(t), pool, m[1]); err != nil || exists {
		t.Errorf("schema %s still exists (%v)", m[1], err)
	}
}

// plainOutput fails the test if output meant for a file or a pipe holds a
// carriage return or an escape sequence, or a progress line wider than
// the default 80 columns.
func plainOutput(t *testing.T, out, progressMark string) (progress []string) {
	t.Helper()
	if strings.ContainsAny(out, "\r\x1b") {
		t.Errorf("carriage return or escape in output that is not a terminal:\n%q", out)
	}
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, progressMark) {
			progress = append(progress, l)
			if w := cli.DisplayWidth(l); w > cli.DefaultColumns {
				t.Errorf("progress line of %d columns, over %d: %q", w, cli.DefaultColumns, l)
			}
		}
	}
	return progress
}

func TestBench_CountRunsBothSystemsAndDropsItsSchema(t *testing.T) {
	env := testenv.Postgres(t)
	r := runCLI(t, "bench", "--postgres", env.URL, "--count", "500", "--batch", "50", "--concurrency", "4").wantCode(t, exitOK)
	for _, want := range []string{
		"outbox relay: batch 50, a backlog of 500 entries loaded first",
		"outbox relay done\n  total      500 entries\n  elapsed    ",
		"work-row burn-down: batch 50, 4 handlers, 500 rows filled first",
		"work-row burn-down done\n  total      500 rows\n  elapsed    ",
		"  mean rate  ",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("the output lacks %q:\n%s", want, r.stdout)
		}
	}
	if strings.Count(r.stdout, "  mean rate  ") != 2 {
		t.Errorf("want a mean rate for each system:\n%s", r.stdout)
	}
	if strings.Contains(r.stdout, "latency") {
		t.Errorf("a latency printed for a preloaded backlog, which has no commit to time from:\n%s", r.stdout)
	}
	if r.stderr != "" {
		t.Errorf("stderr: %q", r.stderr)
	}
	plainOutput(t, r.stdout, " backlog ")
	schemaGone(t, env.Pool, r.stdout)
}

func TestBench_DurationPrintsProgressLinesAndTheLatency(t *testing.T) {
	t.Setenv(cli.EnvColumns, "")
	every := benchProgressEvery
	benchProgressEvery = 100 * time.Millisecond
	t.Cleanup(func() { benchProgressEvery = every })
	env := testenv.Postgres(t)

	r := runCLI(t, "bench", "outbox", "--postgres", env.URL, "--duration", "1500ms", "--producers", "2", "--batch", "20").wantCode(t, exitOK)

	for _, want := range []string{"outbox relay: batch 20, 2 producers enqueueing for 1.5s", "outbox relay done\n  total      ",
		"  mean rate  ", "  latency    p50 ", "(commit to delivery, "} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("the output lacks %q:\n%s", want, r.stdout)
		}
	}
	if strings.Contains(r.stdout, "work-row") {
		t.Errorf("bench outbox ran the work rows too:\n%s", r.stdout)
	}
	progress := plainOutput(t, r.stdout, " backlog ")
	if len(progress) == 0 {
		t.Fatalf("no progress line:\n%s", r.stdout)
	}
	for _, l := range progress {
		if !regexp.MustCompile(`^outbox relay \d+\.\ds: \d+ entries · \S+( k| M)?/s · backlog \d+$`).MatchString(l) {
			t.Errorf("progress line %q: want the time, the total, the rate and the backlog", l)
		}
	}
	schemaGone(t, env.Pool, r.stdout)
}

// lockedBuffer is a buffer written by a running command and read by the
// test, which is told when a line containing mark was written.
type lockedBuffer struct {
	mu     sync.Mutex
	buf    bytes.Buffer
	mark   string
	marked chan struct{}
	once   sync.Once
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	n, err := b.buf.Write(p)
	if strings.Contains(b.buf.String(), b.mark) {
		b.once.Do(func() { close(b.marked) })
	}
	return n, err
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func TestBench_InterruptedDropsItsSchema(t *testing.T) {
	env := testenv.Postgres(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// Interrupted once the relay runs: its schema holds baton's tables.
	out := &lockedBuffer{mark: "producers enqueueing", marked: make(chan struct{})}
	var errb lockedBuffer
	errb.marked = make(chan struct{})
	done := make(chan int, 1)
	go func() { done <- run(ctx, []string{"bench", "--postgres", env.URL, "--duration", "5m"}, out, &errb) }()
	select {
	case <-out.marked:
	case code := <-done:
		t.Fatalf("the bench ended (%d) before it ran:\n%s\n%s", code, out.String(), errb.String())
	}
	cancel()
	if code := <-done; code != exitInterrupted {
		t.Fatalf("exit status %d, want %d\n%s\n%s", code, exitInterrupted, out.String(), errb.String())
	}
	if got := errb.String(); got != "baton: interrupted\n" {
		t.Errorf("stderr %q, want the one line saying interrupted", got)
	}
	schemaGone(t, env.Pool, out.String())
}

func TestBench_KeepLeavesTheSchemaAndSaysHowToDropIt(t *testing.T) {
	env := testenv.Postgres(t)
	r := runCLI(t, "bench", "workrows", "--postgres", env.URL, "--count", "50", "--keep").wantCode(t, exitOK)
	m := benchSchema.FindStringSubmatch(r.stdout)
	if m == nil {
		t.Fatalf("no schema named:\n%s", r.stdout)
	}
	t.Cleanup(func() { _, _ = env.Pool.Exec(context.Background(), `DROP SCHEMA IF EXISTS "`+m[1]+`" CASCADE`) })
	if !strings.Contains(r.stdout, `schema "`+m[1]+`" kept (--keep); drop it with: DROP SCHEMA "`+m[1]+`" CASCADE`) {
		t.Errorf("the output does not say the schema is kept and how to drop it:\n%s", r.stdout)
	}
	if exists, err := ops.SchemaExists(testContext(t), env.Pool, m[1]); err != nil || !exists {
		t.Errorf("--keep: schema %s is gone (%v)", m[1], err)
	}
}

// TestBench_BadInputIsOneLineAndConnectsNowhere: each refusal comes before
// any connection (the database named does not answer, and the error is not
// about it), so no schema is created.
func TestBench_BadInputIsOneLineAndConnectsNowhere(t *testing.T) {
	t.Setenv(cli.EnvDatabaseURL, "")
	nowhere := []string{"--postgres", "postgres://postgres@127.0.0.1:1/postgres?connect_timeout=2"}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--duration", "5s", "--count", "10"}, "--duration and --count: give one of them"},
		{[]string{"--count", "0"}, "--count is 0; it must be between 1 and"},
		{[]string{"--count", "-3"}, "--count is -3"},
		{[]string{"--count", "many"}, "--count"},
		{[]string{"--duration", "0s"}, "--duration is 0s; it must be more than 0"},
		{[]string{"--duration", "-1s"}, "--duration is -1s"},
		{[]string{"--duration", "soon"}, "--duration"},
		{[]string{"--batch", "0"}, "--batch is 0"},
		{[]string{"--batch", "5000"}, "--batch is 5000; the work-row worker claims between 1 and 1000"},
		{[]string{"outbox", "--batch", "200000"}, "--batch is 200000; the relay reads between 1 and 100000"},
		{[]string{"--concurrency", "0"}, "--concurrency is 0"},
		{[]string{"outbox", "--concurrency", "8"}, "--concurrency sets the work-row worker's handlers"},
		{[]string{"workrows", "--producers", "8"}, "--producers sets the goroutines enqueueing outbox entries"},
		{[]string{"--count", "10", "--producers", "8"}, "--producers applies to a --duration run"},
		{[]string{"--producers", "0"}, "--producers is 0"},
		{[]string{"queues"}, `"queues": want outbox, workrows or all`},
		{[]string{"outbox", "workrows"}, "takes at most one of outbox, workrows or all"},
		{[]string{"--schema", "x"}, "unknown flag: --schema"},
	} {
		args := append(append([]string{"bench"}, tc.args...), nowhere...)
		r := runCLI(t, args...).wantCode(t, exitUsage)
		if !strings.Contains(r.stderr, tc.want) || strings.Count(strings.TrimRight(r.stderr, "\n"), "\n") != 0 {
			t.Errorf("%v: stderr %q, want one line mentioning %q", tc.args, r.stderr, tc.want)
		}
		if r.stdout != "" {
			t.Errorf("%v: stdout %q, want nothing", tc.args, r.stdout)
		}
	}
	r := runCLI(t, "bench").wantCode(t, exitUsage)
	if !strings.Contains(r.stderr, "no database given: pass --postgres URL or set "+cli.EnvDatabaseURL) {
		t.Errorf("no database: %q", r.stderr)
	}
}
