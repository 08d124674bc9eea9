package pgxstore

import (
	"context"
	"errors"
	"io"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/baton-go/baton/core/outbox"
	"github.com/baton-go/baton/internal/testenv"
)

// What the logical source needs from the server, and what it does when
// the server or an operator takes it away.

// openErr opens the log and closes the reader when one came.
func openErr(t *testing.T, st *OutboxLogStore, token uint64) error {
	t.Helper()
	ctx := testContext(t)
	r, err := st.Open(ctx, token)
	if err == nil {
		_ = r.Close(ctx)
	}
	return err
}

func wantMisconfigured(t *testing.T, err error, says ...string) {
	t.Helper()
	if !errors.Is(err, outbox.ErrLogMisconfigured) {
		t.Fatalf("err = %v, want one wrapping ErrLogMisconfigured", err)
	}
	for _, s := range says {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("the error does not say %q:\n%v", s, err)
		}
	}
}

func TestOutboxLogStore_OpenRefusesAServerWithoutLogicalWAL(t *testing.T) {
	env := testenv.Postgres(t)
	var level string
	if err := env.Pool.QueryRow(testContext(t), `SHOW wal_level`).Scan(&level); err != nil {
		t.Fatal(err)
	}
	if level == "logical" {
		t.Skip("the shared server runs with wal_level = logical")
	}
	e := attachLog(t, env, logOptions(t))
	wantMisconfigured(t, openErr(t, e.store, 1), "wal_level", "logical")
}

// roleEnv is the test's log store as a role of its own, created with
// attrs, which may use the test's schema and its tables.
func roleEnv(t *testing.T, e *logEnv, attrs string) *OutboxLogStore {
	t.Helper()
	ctx := testContext(t)
	role := strings.ReplaceAll(e.slot, "baton_t_", "baton_r_")
	if _, err := e.Pool.Exec(ctx, `CREATE ROLE `+role+` LOGIN `+attrs); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx := context.Background()
		_, _ = e.Pool.Exec(ctx, `DROP OWNED BY `+role)
		_, _ = e.Pool.Exec(ctx, `DROP ROLE `+role)
	})
	if _, err := e.Pool.Exec(ctx, `GRANT USAGE ON SCHEMA `+pgx.Identifier{e.Schema}.Sanitize()+` TO `+role+`;
GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA `+pgx.Identifier{e.Schema}.Sanitize()+` TO `+role); err != nil {
		t.Fatal(err)
	}
	cfg, err := pgxpool.ParseConfig(e.URL)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.User = role
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	opts := e.store.Options()
	opts.ConnString = ""
	st, err := NewOutboxLogStore(pool, opts)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func TestOutboxLogStore_OpenNeedsTheReplicationAttribute(t *testing.T) {
	e := newLogEnv(t)
	wantMisconfigured(t, openErr(t, roleEnv(t, e, "NOREPLICATION"), 1), "REPLICATION")
}

func TestOutboxLogStore_OpenNeedsTheTablesOwnerToCreateThePublication(t *testing.T) {
	e := newLogEnv(t)
	st := roleEnv(t, e, "REPLICATION")
	wantMisconfigured(t, openErr(t, st, 1), "CREATE PUBLICATION", "owner")
	// Created by the owner, the publication serves the role.
	ctx := testContext(t)
	if _, err := e.Pool.Exec(ctx, `CREATE PUBLICATION `+st.Options().Publication+` FOR TABLE baton_outbox WITH (publish = 'insert')`); err != nil {
		t.Fatal(err)
	}
	if err := openErr(t, st, 1); err != nil {
		t.Fatalf("Open with the publication created by the owner: %v", err)
	}
}

func TestOutboxLogStore_SlotCreationTimesOutNamingTheBlockingTransaction(t *testing.T) {
	e := newLogEnv(t)
	ctx := testContext(t)
	cfg, err := pgxpool.ParseConfig(e.URL)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["application_name"] = "forgotten-psql-session"
	blocker, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer blocker.Close()
	tx, err := blocker.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	var pid string
	if err := tx.QueryRow(ctx, `SELECT pg_current_xact_id()::text, pg_backend_pid()::text`).Scan(new(string), &pid); err != nil {
		t.Fatal(err)
	}
	opts := e.store.Options()
	opts.SlotCreateTimeout = time.Second
	st, err := NewOutboxLogStore(e.Pool, opts)
	if err != nil {
		t.Fatal(err)
	}
	err = openErr(t, st, 1)
	wantMisconfigured(t, err, "SlotCreateTimeout", "forgotten-psql-session", "backend "+pid)
	if _, exists, serr := st.SlotStatus(ctx); serr != nil || exists {
		t.Fatalf("after the timeout the slot exists (%v, %v): a cancelled creation must leave none", exists, serr)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if err := openErr(t, st, 1); err != nil {
		t.Fatalf("Open once the blocking transaction ended: %v", err)
	}
}

// startupProxy is a loopback proxy in front of target that rewrites the
// parameters of each connection's startup message and then passes the
// bytes through, as a pooler between the replication connection and the
// server would. It returns the proxy's host:port.
func startupProxy(t *testing.T, target string, rewrite func(params map[string]string)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			client, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() { proxyStartup(client, target, rewrite) })
		}
	})
	return ln.Addr().String()
}

// proxyStartup serves one connection of startupProxy. Encryption is
// refused, so that the startup message can be read.
func proxyStartup(client net.Conn, target string, rewrite func(map[string]string)) {
	defer client.Close()
	be := pgproto3.NewBackend(client, client)
	var sm *pgproto3.StartupMessage
	for sm == nil {
		msg, err := be.ReceiveStartupMessage()
		if err != nil {
			return
		}
		switch m := msg.(type) {
		case *pgproto3.StartupMessage:
			sm = m
		case *pgproto3.SSLRequest, *pgproto3.GSSEncRequest:
			if _, err := client.Write([]byte("N")); err != nil {
				return
			}
		default:
			return
		}
	}
	rewrite(sm.Parameters)
	server, err := net.Dial("tcp", target)
	if err != nil {
		return
	}
	defer server.Close()
	buf, err := sm.Encode(nil)
	if err != nil {
		return
	}
	if _, err := server.Write(buf); err != nil {
		return
	}
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(server, client); done <- struct{}{} }()
	go func() { _, _ = io.Copy(client, server); done <- struct{}{} }()
	<-done
	client.Close()
	server.Close()
	<-done
}

// A pooler that does not pass replication through gives the reader a
// connection that is no WAL sender of the database: one that drops the
// replication parameter (a transaction pooler told to ignore it) hands it
// an ordinary session, where IDENTIFY_SYSTEM is a syntax error; one that
// turns it into physical replication hands it a WAL sender bound to no
// database. Open stops at the check, before the slot is created.
func TestOutboxLogStore_OpenNeedsAReplicationConnectionBoundToTheDatabase(t *testing.T) {
	e := newLogEnv(t)
	ctx := testContext(t)
	cfg, err := pgconn.ParseConfig(e.URL)
	if err != nil {
		t.Fatal(err)
	}
	target := net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port)))
	for name, c := range map[string]struct {
		rewrite func(map[string]string)
		says    []string
	}{
		"replication dropped": {func(p map[string]string) { delete(p, "replication") }, []string{"IDENTIFY_SYSTEM failed", "transaction pooler"}},
		"physical":            {func(p map[string]string) { p["replication"] = "true" }, []string{"not bound to a database", "connect directly"}},
	} {
		t.Run(name, func(t *testing.T) {
			u, err := url.Parse(e.URL)
			if err != nil {
				t.Fatal(err)
			}
			u.Host = startupProxy(t, target, c.rewrite)
			q := u.Query()
			q.Set("sslmode", "disable")
			u.RawQuery = q.Encode()
			opts := e.store.Options()
			opts.ConnString = u.String()
			st, err := NewOutboxLogStore(e.Pool, opts)
			if err != nil {
				t.Fatal(err)
			}
			wantMisconfigured(t, openErr(t, st, 1), c.says...)
			if _, exists, err := st.SlotStatus(ctx); err != nil || exists {
				t.Fatalf("after the refused Open the slot exists (%v, %v)", exists, err)
			}
		})
	}
	// Straight to the server, the same store's options open the log.
	if err := openErr(t, e.store, 1); err != nil {
		t.Fatalf("Open on a direct connection: %v", err)
	}
}

// notes collects notices.
type notes struct {
	mu   sync.Mutex
	list []outbox.Notice
}

func (n *notes) notify(_ context.Context, x outbox.Notice) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.list = append(n.list, x)
	return nil
}

func (n *notes) of(kind outbox.NoticeKind) []outbox.Notice {
	n.mu.Lock()
	defer n.mu.Unlock()
	var out []outbox.Notice
	for _, x := range n.list {
		if x.Kind == kind {
			out = append(out, x)
		}
	}
	return out
}

func commitEntry(t *testing.T, ctx context.Context, pool *pgxpool.Pool, lane string) outbox.ID {
	t.Helper()
	id := outbox.NewID()
	if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return Enqueue(ctx, tx, id, lane, []byte(`{}`)) }); err != nil {
		t.Fatal(err)
	}
	return id
}

func TestOutboxLog_APublicationDroppedByHandStopsTheDriverSayingWhatToDo(t *testing.T) {
	e := newLogEnv(t)
	ctx := testContext(t)
	rec := &delivered{lane: "a"}
	n := &notes{}
	runDriver(t, e.store, e.store, func(c *outbox.Config) { c.Notify = n.notify }, rec)
	awaitSource(t, e.store, outbox.SourceLogical)
	commitEntry(t, ctx, e.Pool, "a")
	eventually(t, 20*time.Second, "the first entry was not delivered", func() bool { return len(rec.ids()) == 1 })
	if _, err := e.Pool.Exec(ctx, `DROP PUBLICATION `+e.store.Options().Publication); err != nil {
		t.Fatal(err)
	}
	commitEntry(t, ctx, e.Pool, "a")
	eventually(t, 20*time.Second, "no stuck notice after the publication was dropped", func() bool { return len(n.of(outbox.NoticeStuck)) > 0 })
	msg := n.of(outbox.NoticeStuck)[0].LastError
	for _, s := range []string{"publication", "dropped by hand", "baton outbox slot drop"} {
		if !strings.Contains(msg, s) {
			t.Errorf("the notice does not say %q: %s", s, msg)
		}
	}
	if got := len(rec.ids()); got != 1 {
		t.Fatalf("delivered %d entries after the publication was dropped", got-1)
	}
}

func TestOutboxLog_SwitchesFromTheWalkAndBackLosingNothing(t *testing.T) {
	e := newLogEnv(t)
	ctx := testContext(t)
	seq := &sequence{}
	var committed []outbox.ID
	commit := func(n int) {
		for range n {
			committed = append(committed, commitEntry(t, ctx, e.Pool, "a"))
		}
	}
	awaitAll := func(what string) {
		t.Helper()
		eventually(t, 30*time.Second, what, func() bool {
			seen := map[outbox.ID]bool{}
			for _, id := range seq.snapshot() {
				seen[id] = true
			}
			for _, id := range committed {
				if !seen[id] {
					return false
				}
			}
			return true
		})
	}
	// The walk delivers the first ones.
	commit(20)
	stop := runDriver(t, e.store, nil, nil, lanesTo(seq, nil, "a")...)
	awaitAll("the walk did not deliver")
	stop()
	commit(20) // committed while no driver runs
	// Walk → log: nothing lost, nothing twice.
	stop = runDriver(t, e.store, e.store, nil, lanesTo(seq, nil, "a")...)
	awaitSource(t, e.store, outbox.SourceLogical)
	commit(20)
	awaitAll("the log did not deliver after the switch")
	if _, repeats := firstOccurrences(seq.snapshot()); repeats != 0 {
		t.Fatalf("%d entries delivered twice across the switch from the walk", repeats)
	}
	// Marks are taken at most once a second: let the settled position
	// pass one, as a running deployment's has.
	for range 3 {
		time.Sleep(1100 * time.Millisecond)
		commit(1)
	}
	awaitAll("the log did not deliver")
	stop()
	before := len(seq.snapshot())
	commit(20)
	// Log → walk: nothing lost; what comes again is bounded by the mark.
	runDriver(t, e.store, nil, nil, lanesTo(seq, nil, "a")...)
	awaitSource(t, e.store, outbox.SourceWalk)
	commit(20)
	awaitAll("the walk did not deliver after the switch back")
	_, repeats := firstOccurrences(seq.snapshot())
	t.Logf("switch back to the walk: %d entries delivered again (of %d delivered by the log before it)", repeats, before)
	if repeats > 5 {
		t.Fatalf("%d entries delivered again after the switch back, more than the last mark interval's", repeats)
	}
}

func TestOutboxLog_RetentionDeletesOnlySettledRows(t *testing.T) {
	e := newLogEnv(t)
	ctx := testContext(t)
	rec := &delivered{lane: "a"}
	runDriver(t, e.store, e.store, func(c *outbox.Config) {
		c.RetentionDisabled = false
		c.RetentionWindow = time.Nanosecond
		c.RetentionInterval = 100 * time.Millisecond
	}, rec)
	awaitSource(t, e.store, outbox.SourceLogical)
	// An entry committed late by an old transaction must not go before it
	// was delivered.
	old, err := e.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer old.Rollback(context.WithoutCancel(ctx))
	oldID := outbox.NewID()
	if err := Enqueue(ctx, old, oldID, "a", []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	for range 30 {
		commitEntry(t, ctx, e.Pool, "a")
		time.Sleep(100 * time.Millisecond)
	}
	if err := old.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	for range 15 {
		commitEntry(t, ctx, e.Pool, "a")
		time.Sleep(100 * time.Millisecond)
	}
	eventually(t, 30*time.Second, "not every entry was delivered", func() bool { return len(rec.ids()) == 46 })
	eventually(t, 30*time.Second, "retention did not delete the delivered rows", func() bool {
		var n int
		_ = e.Pool.QueryRow(ctx, `SELECT count(*) FROM baton_outbox`).Scan(&n)
		return n <= 3 // the last second's, below no passed mark yet
	})
	found := false
	for _, id := range rec.ids() {
		found = found || id == oldID
	}
	if !found {
		t.Fatal("the old transaction's entry was deleted before it was delivered")
	}
}

func TestOutboxLog_AnInvalidatedSlotStopsTheDriverUntilItIsDropped(t *testing.T) {
	// A server of its own: max_slot_wal_keep_size and the slot count are
	// the server's.
	srv := testenv.StartPostgresServer(t, append(slices.Clone(testenv.LogicalSettings), "max_slot_wal_keep_size=1MB", "max_replication_slots=2")...)
	ctx := testContext(t)
	admin, err := pgxpool.New(ctx, srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	if _, err := admin.Exec(ctx, `CREATE SCHEMA s`); err != nil {
		t.Fatal(err)
	}
	cfg, err := pgxpool.ParseConfig(srv.URL() + "&search_path=s")
	if err != nil {
		t.Fatal(err)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	e := attachLog(t, &testenv.PostgresEnv{ServerURL: srv.URL(), URL: cfg.ConnString(), Schema: "s", Pool: pool}, logOptions(t))
	seq := &sequence{}
	n := &notes{}
	configure := func(c *outbox.Config) { c.Notify = n.notify }
	stop := runDriver(t, e.store, e.store, configure, lanesTo(seq, nil, "a")...)
	awaitSource(t, e.store, outbox.SourceLogical)
	committed := []outbox.ID{commitEntry(t, ctx, pool, "a")}
	eventually(t, 20*time.Second, "the first entry was not delivered", func() bool { return len(seq.snapshot()) == 1 })
	stop()

	// Nobody reads the slot while WAL piles up past max_slot_wal_keep_size.
	for range 4 {
		committed = append(committed, commitEntry(t, ctx, pool, "a"))
		if _, err := admin.Exec(ctx, `SELECT pg_switch_wal()`); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := admin.Exec(ctx, `CHECKPOINT`); err != nil {
		t.Fatal(err)
	}
	if st, ok, err := e.store.SlotStatus(ctx); err != nil || !ok || st.WALStatus != "lost" {
		t.Fatalf("the slot is %+v (%v, %v), want wal_status lost", st, ok, err)
	}

	runDriver(t, e.store, e.store, configure, lanesTo(seq, nil, "a")...)
	eventually(t, 20*time.Second, "no stuck notice for the invalidated slot", func() bool { return len(n.of(outbox.NoticeStuck)) > 0 })
	msg := n.of(outbox.NoticeStuck)[0].LastError
	for _, s := range []string{"invalidated", "max_slot_wal_keep_size", "baton outbox slot drop"} {
		if !strings.Contains(msg, s) {
			t.Errorf("the notice does not say %q: %s", s, msg)
		}
	}
	if got := len(seq.snapshot()); got != 1 {
		t.Fatalf("delivered %d entries from an invalidated slot", got-1)
	}

	// The operator drops the slot: the driver creates it again and walks
	// the table from the settled cursor, so nothing committed meanwhile
	// is lost.
	if err := e.store.DropSlot(ctx, true); err != nil {
		t.Fatal(err)
	}
	committed = append(committed, commitEntry(t, ctx, pool, "a"))
	eventually(t, 30*time.Second, "entries committed while the slot was lost were not delivered", func() bool {
		got, _ := firstOccurrences(seq.snapshot())
		return len(got) == len(committed)
	})
	got, _ := firstOccurrences(seq.snapshot())
	if !slices.Equal(got, committed) {
		t.Fatalf("delivered %v, want %v", got, committed)
	}

	// Both slots of the server taken: a store of another slot is told so.
	if _, err := admin.Exec(ctx, `SELECT pg_create_logical_replication_slot('filler', 'pgoutput')`); err != nil {
		t.Fatal(err)
	}
	opts := e.store.Options()
	opts.Slot, opts.ConnString = "another", ""
	other, err := NewOutboxLogStore(pool, opts)
	if err != nil {
		t.Fatal(err)
	}
	wantMisconfigured(t, openErr(t, other, 1), "no replication slot is free", "max_replication_slots")
}

func TestNewOutboxLogStore_RejectsInvalidOptionsNamingTheField(t *testing.T) {
	env := testenv.Postgres(t)
	for field, opts := range map[string]OutboxLogOptions{
		"Slot":              {Slot: "Has-Capitals"},
		"Publication":       {Publication: strings.Repeat("p", 64)},
		"SlotCreateTimeout": {SlotCreateTimeout: -time.Second},
		"StatusInterval":    {StatusInterval: -time.Second},
		"ConnString":        {ConnString: "postgres://%zz"},
	} {
		if _, err := NewOutboxLogStore(env.Pool, opts); err == nil || !strings.Contains(err.Error(), "OutboxLogOptions."+field) {
			t.Errorf("%s: err = %v, want one naming OutboxLogOptions.%s", field, err, field)
		}
	}
}
