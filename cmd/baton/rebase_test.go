package main

import (
	"context"
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/baton-go/baton/backends/pgxstore"
	"github.com/baton-go/baton/cmd/baton/internal/ops"
	"github.com/baton-go/baton/core/outbox"
	"github.com/baton-go/baton/internal/testenv"
	locksmemory "github.com/baton-go/baton/locks/memory"
)

// TestOutboxRebase_AfterARealDumpAndRestoreTheDriverRefusesThenDeliversInOrder
// dumps an outbox from one cluster with pg_dump and loads it into another
// with pg_restore. The source's transaction counter was pushed into epoch 5
// with pg_resetwal first, so the restored cursor lies far above the
// target's counter: deterministically the state a logical restore leaves.
// The driver on the target refuses to walk and raises the stuck notice;
// baton outbox rebase --dry-run changes nothing; baton outbox rebase
// repairs it, and the same driver then delivers what the old cluster had
// not, then what was written on the target since, in order, and nothing
// the old cluster had delivered.
func TestOutboxRebase_AfterARealDumpAndRestoreTheDriverRefusesThenDeliversInOrder(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const schema = "app"

	src := testenv.StartPostgresServer(t)
	src.Stop(false) // a clean shutdown, with the checkpoint pg_resetwal requires
	if _, err := src.Tool("pg_resetwal", "-e", "5", "-D", src.DataDir()); err != nil {
		t.Fatal(err)
	}
	src.Start()
	srcPool, srcStore := outboxOn(t, ctx, src.URL(), schema, true)
	delivered := commitEntries(t, ctx, srcPool, srcStore, 2, 2) // the old cluster delivers these
	pending := commitEntries(t, ctx, srcPool, srcStore, 2)      // and not these
	all := visibleEntries(t, ctx, srcStore, 6)
	if all[0].XID>>32 != 5 {
		t.Fatalf("the source's entries have xid %d, not in epoch 5", all[0].XID)
	}
	// The old cluster's last pass: the first four delivered, one parked.
	if err := srcStore.Settle(ctx, outbox.Settlement{To: all[3].Cursor(), Park: []outbox.Parked{{Entry: all[1], Reason: "409"}}}); err != nil {
		t.Fatal(err)
	}
	dump := filepath.Join(filepath.Dir(src.DataDir()), "outbox.dump")
	if _, err := src.Tool("pg_dump", "--format=custom", "--file="+dump, "--dbname="+src.URL()); err != nil {
		t.Fatal(err)
	}
	srcPool.Close()

	dst := testenv.StartPostgresServer(t)
	if _, err := dst.Tool("pg_restore", "--exit-on-error", "--dbname="+dst.URL(), dump); err != nil {
		t.Fatal(err)
	}
	dstPool, dstStore := outboxOn(t, ctx, dst.URL(), schema, false)
	if d, err := dstStore.GetDead(ctx, all[1].ID); err != nil || d.Error != "409" {
		t.Fatalf("the restored dead letter: %+v, %v", d, err)
	}
	next, err := dstStore.NextXID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if next >= all[3].XID {
		t.Fatalf("the target's next xid %d is not below the restored cursor's %d", next, all[3].XID)
	}
	written := commitEntries(t, ctx, dstPool, dstStore, 2) // a producer on the target

	var (
		mu       sync.Mutex
		got      []outbox.ID
		notices  []outbox.Notice
		noticeCh = make(chan struct{}, 16)
	)
	locks, err := locksmemory.NewProvider(locksmemory.Options{})
	if err != nil {
		t.Fatal(err)
	}
	d, err := outbox.NewDriver(outbox.Config{
		Store: dstStore, Locks: locks,
		Processors: []outbox.Processor{outbox.ProcessorFunc{LaneName: "restore", Func: func(_ context.Context, run []outbox.Entry) ([]outbox.Outcome, error) {
			mu.Lock()
			defer mu.Unlock()
			out := make([]outbox.Outcome, len(run))
			for i, e := range run {
				got = append(got, e.ID)
				out[i] = outbox.Delivered()
			}
			return out, nil
		}}},
		Notify: func(_ context.Context, n outbox.Notice) error {
			mu.Lock()
			notices = append(notices, n)
			mu.Unlock()
			noticeCh <- struct{}{}
			return nil
		},
		IdleDelay: 20 * time.Millisecond, ErrorDelay: 20 * time.Millisecond, LeaderWait: time.Second,
		RetentionDisabled: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = d.Run(runCtx)
	}()
	defer func() {
		stop()
		<-done
	}()

	select {
	case <-noticeCh:
	case <-time.After(time.Minute):
		t.Fatal("no stuck notice from a driver on a restored outbox")
	}
	mu.Lock()
	if n := notices[0]; n.Kind != outbox.NoticeStuck || !strings.Contains(n.LastError, "ahead of") || len(got) != 0 {
		t.Fatalf("notice %+v, %d deliveries; want a stuck notice saying the cursor is ahead, and nothing delivered", n, len(got))
	}
	mu.Unlock()

	before, err := dstStore.State(ctx)
	if err != nil {
		t.Fatal(err)
	}
	r := runCLI(t, "outbox", "rebase", "--postgres", dst.URL(), "--schema", schema, "--dry-run", "--json").wantCode(t, exitOK)
	var rep ops.RebaseReport
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatalf("%v:\n%s", err, r.stdout)
	}
	if !rep.DryRun || rep.Delivered != 4 || rep.Pending != 2 || rep.Written != 2 {
		t.Fatalf("dry run %+v; want 4 delivered by the old cluster (one of them parked), 2 it had not, 2 written here", rep)
	}
	after, err := dstStore.State(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if before[outbox.KeyLastScannedXID] != after[outbox.KeyLastScannedXID] || before[outbox.KeyLastScannedID] != after[outbox.KeyLastScannedID] {
		t.Fatalf("the dry run moved the cursor: %v", after)
	}

	r = runCLI(t, "outbox", "rebase", "--postgres", dst.URL(), "--schema", schema).wantCode(t, exitOK)
	if !strings.Contains(r.stdout, "rebased") {
		t.Errorf("rebase printed:\n%s", r.stdout)
	}
	later := commitEntries(t, ctx, dstPool, dstStore, 1)

	sorted := func(ids []outbox.ID) []outbox.ID { return slices.SortedFunc(slices.Values(ids), outbox.ID.Compare) }
	want := slices.Concat(sorted(pending), sorted(written), later)
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		mu.Lock()
		n := len(got)
		mu.Unlock()
		if n >= len(want) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d entries delivered after the rebase", n, len(want))
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(got, want) {
		t.Fatalf("delivered %v after the rebase; want the old cluster's undelivered %v, then those written here %v, then the later %v",
			got, sorted(pending), sorted(written), later)
	}
	for _, id := range delivered {
		if slices.Contains(got, id) {
			t.Fatalf("entry %s, delivered by the old cluster, was delivered again", id)
		}
	}
	r = runCLI(t, "outbox", "rebase", "--postgres", dst.URL(), "--schema", schema).wantCode(t, exitUsage)
	if !strings.Contains(r.stderr, "needs no rebase") {
		t.Errorf("a second rebase said:\n%s", r.stderr)
	}
}

// outboxOn opens a pool on url and the outbox store in schema, migrating
// it first when asked to.
func outboxOn(t *testing.T, ctx context.Context, url, schema string, migrate bool) (*pgxpool.Pool, *pgxstore.OutboxStore) {
	t.Helper()
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if migrate {
		if err := pgxstore.Migrate(ctx, pool, pgxstore.MigrateOptions{Schema: schema}); err != nil {
			t.Fatal(err)
		}
	}
	st, err := pgxstore.NewOutboxStore(pool, pgxstore.OutboxStoreOptions{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	return pool, st
}

// commitEntries commits one transaction per count, of that many entries,
// and returns every id, in commit order.
func commitEntries(t *testing.T, ctx context.Context, pool *pgxpool.Pool, st *pgxstore.OutboxStore, counts ...int) []outbox.ID {
	t.Helper()
	var ids []outbox.ID
	for _, n := range counts {
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var these []outbox.ID
		for range n {
			id := outbox.NewID()
			if err := st.Enqueue(ctx, tx, id, "restore", []byte(`{}`)); err != nil {
				t.Fatal(err)
			}
			these = append(these, id)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, these...)
	}
	return ids
}

// visibleEntries waits until n entries are visible and returns them.
func visibleEntries(t *testing.T, ctx context.Context, st *pgxstore.OutboxStore, n int) []outbox.Entry {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		es, err := st.Scan(ctx, outbox.Cursor{}, 100)
		if err != nil {
			t.Fatal(err)
		}
		if len(es) >= n {
			return es
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d entries visible", len(es), n)
		}
	}
}
