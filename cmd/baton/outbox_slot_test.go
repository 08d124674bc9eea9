package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/baton-go/baton/backends/pgxstore"
	"github.com/baton-go/baton/cmd/baton/internal/ops"
	"github.com/baton-go/baton/core/outbox"
	"github.com/baton-go/baton/internal/testenv"
	locksmemory "github.com/baton-go/baton/locks/memory"
)

func TestOutboxSlotCommands(t *testing.T) {
	env := testenv.LogicalPostgres(t)
	ctx := testContext(t)
	if err := pgxstore.Migrate(ctx, env.Pool, pgxstore.MigrateOptions{}); err != nil {
		t.Fatal(err)
	}
	slot := "baton_cli_" + strings.TrimPrefix(env.Schema, "baton_test_")
	store, err := pgxstore.NewOutboxLogStore(env.Pool, pgxstore.OutboxLogOptions{Slot: slot, Publication: slot})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = env.Pool.Exec(context.Background(), `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1 AND NOT active`, slot)
		_, _ = env.Pool.Exec(context.Background(), `DROP PUBLICATION IF EXISTS `+slot)
	})
	db := []string{"--postgres", env.URL, "--slot", slot, "--publication", slot}
	cmd := func(args ...string) []string { return append(args, db...) }

	r := runCLI(t, cmd("outbox", "slot", "status")...).wantCode(t, exitOK)
	if !strings.Contains(r.stdout, "no replication slot") {
		t.Errorf("status before any driver:\n%s", r.stdout)
	}
	runCLI(t, cmd("outbox", "slot", "drop")...).wantCode(t, exitUsage)

	// A driver reads the slot.
	locks, err := locksmemory.NewProvider(locksmemory.Options{})
	if err != nil {
		t.Fatal(err)
	}
	d, err := outbox.NewDriver(outbox.Config{
		Store: store, Log: store, Locks: locks, IdleDelay: 50 * time.Millisecond, RetentionDisabled: true,
		Notify: func(context.Context, outbox.Notice) error { return nil },
		Processors: []outbox.Processor{outbox.ProcessorFunc{LaneName: "a", Func: func(_ context.Context, run []outbox.Entry) ([]outbox.Outcome, error) {
			out := make([]outbox.Outcome, len(run))
			for i := range out {
				out[i] = outbox.Delivered()
			}
			return out, nil
		}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	dctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = d.Run(dctx) }()
	defer func() { stop(); <-done }()
	if err := pgx.BeginFunc(ctx, env.Pool, func(tx pgx.Tx) error {
		return pgxstore.Enqueue(ctx, tx, outbox.NewID(), "a", []byte(`{}`))
	}); err != nil {
		t.Fatal(err)
	}
	var rep ops.SlotReport
	deadline := time.Now().Add(30 * time.Second)
	for {
		r = runCLI(t, cmd("outbox", "slot", "status", "--json")...).wantCode(t, exitOK)
		rep = ops.SlotReport{}
		if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
			t.Fatal(err)
		}
		if rep.ActivePID != nil && rep.Source != nil && *rep.Source == outbox.SourceLogical && rep.SettledLogPosition != "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the slot is not read by a driver that settled: %+v", rep)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !rep.Exists || rep.WALStatus == "" || rep.RetainedWALBytes == nil || !rep.PublicationExists || rep.ConfirmedFlushLSN == "" {
		t.Errorf("slot status --json: %+v", rep)
	}
	r = runCLI(t, cmd("outbox", "slot", "status")...).wantCode(t, exitOK)
	for _, want := range []string{"retained WAL", "bytes", "wal_status", "backend"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("slot status lacks %q:\n%s", want, r.stdout)
		}
	}

	// An active slot is dropped only with --force.
	r = runCLI(t, cmd("outbox", "slot", "drop")...).wantCode(t, exitFailure)
	if !strings.Contains(r.stderr, "--force") {
		t.Errorf("drop of an active slot: %s", r.stderr)
	}
	stop()
	<-done
	runCLI(t, cmd("outbox", "slot", "drop")...).wantCode(t, exitOK)
	r = runCLI(t, cmd("outbox", "slot", "status")...).wantCode(t, exitOK)
	if !strings.Contains(r.stdout, "no replication slot") {
		t.Errorf("status after drop:\n%s", r.stdout)
	}
}
