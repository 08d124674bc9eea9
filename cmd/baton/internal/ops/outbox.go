package ops

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"

	"github.com/baton-go/baton/backends/pgxstore"
	"github.com/baton-go/baton/core/outbox"
	"github.com/baton-go/baton/internal/cli"
)

// RebaseReport is what outbox rebase prints with --json.
type RebaseReport struct {
	Schema       string `json:"schema"`
	DryRun       bool   `json:"dry_run"`
	Cursor       string `json:"cursor"`
	NewCursor    string `json:"new_cursor"`
	NextXID      string `json:"next_xid"` // a string: xids exceed JSON's safe integers
	Delivered    int    `json:"delivered"`
	Pending      int    `json:"pending"`
	Written      int    `json:"written_here"`
	Transactions int    `json:"transactions"`
}

// OutboxRebase repairs an outbox restored logically into another cluster
// (baton outbox rebase); with dryRun it only says what it would do.
func OutboxRebase(ctx context.Context, out io.Writer, target Target, dryRun bool) error {
	db, store, err := openOutbox(ctx, target)
	if err != nil {
		return err
	}
	defer db.Close()
	res, err := store.Rebase(ctx, dryRun)
	switch {
	case errors.Is(err, pgxstore.ErrRebaseNotNeeded):
		return cli.Usagef("schema %q: the outbox needs no rebase: its cursor (xid %d) is below this database's next xid (%d); nothing was changed",
			db.schema, res.Cursor.XID, res.NextXID)
	case err != nil:
		return fmt.Errorf("rebase the outbox: %w", err)
	}
	cursor := func(c outbox.Cursor) string { return fmt.Sprintf("(%d, %s)", c.XID, c.ID) }
	rep := RebaseReport{
		Schema: db.schema, DryRun: dryRun, Cursor: cursor(res.Cursor), NewCursor: cursor(res.NewCursor),
		NextXID: strconv.FormatUint(res.NextXID, 10), Delivered: res.Delivered, Pending: res.Pending,
		Written: res.Written, Transactions: res.Transactions,
	}
	if target.JSON {
		return writeJSON(out, rep)
	}
	verb := "rebased"
	if dryRun {
		verb = "dry run, nothing written; a rebase would move"
	}
	fmt.Fprintf(out, "outbox in schema %q: %s\n", db.schema, verb)
	t := newTable(out)
	t.row("cursor", rep.Cursor+" -> "+rep.NewCursor)
	t.row("next xid of this database", rep.NextXID)
	t.row("delivered by the old cluster", strconv.Itoa(res.Delivered)+" (kept behind the cursor for retention)")
	t.row("not delivered by the old cluster", strconv.Itoa(res.Pending)+" (walked first, in their order)")
	t.row("written here since the restore", strconv.Itoa(res.Written)+" (walked next, in their order)")
	return t.flush()
}

// openOutbox opens the database and the outbox store over its schema.
func openOutbox(ctx context.Context, target Target) (*database, *pgxstore.OutboxStore, error) {
	db, err := target.open(ctx)
	if err != nil {
		return nil, nil, err
	}
	if err := db.requireTables(ctx, pgxstore.OutboxTable, pgxstore.OutboxStateTable, pgxstore.OutboxDeadTable); err != nil {
		db.Close()
		return nil, nil, err
	}
	store, err := pgxstore.NewOutboxStore(db.pool, pgxstore.OutboxStoreOptions{Schema: db.schema})
	if err != nil {
		db.Close()
		return nil, nil, schemaNameError(err)
	}
	return db, store, nil
}

// StatusReport is what outbox status prints with --json.
type StatusReport struct {
	Schema             string        `json:"schema"`
	Health             outbox.Health `json:"health"`
	DeadLettersWaiting int           `json:"dead_letters_waiting"`
}

// OutboxStatus prints the outbox's health stamps and the dead letters
// waiting (baton outbox status).
func OutboxStatus(ctx context.Context, out io.Writer, target Target) error {
	db, store, err := openOutbox(ctx, target)
	if err != nil {
		return err
	}
	defer db.Close()
	h, err := outbox.ReadHealth(ctx, store)
	if err != nil {
		return fmt.Errorf("read the outbox state: %w", err)
	}
	rep := StatusReport{Schema: db.schema, Health: h}
	if err := db.pool.QueryRow(ctx, "SELECT count(*) FROM "+db.table(pgxstore.OutboxDeadTable)+
		" WHERE requeued_as IS NULL").Scan(&rep.DeadLettersWaiting); err != nil {
		return fmt.Errorf("count dead letters: %w", err)
	}
	if target.JSON {
		return writeJSON(out, rep)
	}
	fmt.Fprintf(out, "outbox in schema %q\n", db.schema)
	failed := "-"
	if h.FailedAttempts != nil {
		failed = strconv.Itoa(*h.FailedAttempts)
	}
	t := newTable(out, "STAMP", "VALUE")
	t.row(outbox.KeyLastScannedXID, formatStringPtr(h.LastScannedXID))
	t.row(outbox.KeyLastScannedID, formatStringPtr(h.LastScannedID))
	t.row(outbox.KeyLastScanAt, formatTimePtr(h.LastScanAt))
	t.row(outbox.KeyFailedAttempts, failed)
	t.row(outbox.KeyLastError, cli.Cut(formatStringPtr(h.LastError), 160))
	t.row(outbox.KeyLastErrorAt, formatTimePtr(h.LastErrorAt))
	t.row(outbox.KeyFirstStuckAt, formatTimePtr(h.FirstStuckAt))
	t.row(outbox.KeyLastStuckNotificationAt, formatTimePtr(h.LastStuckNotificationAt))
	t.row(outbox.KeyLastDeadLetterAt, formatTimePtr(h.LastDeadLetterAt))
	t.row(outbox.KeyLastDeadLetterNotificationAt, formatTimePtr(h.LastDeadLetterNotificationAt))
	if err := t.flush(); err != nil {
		return err
	}
	switch {
	case h.LastScanAt == nil:
		fmt.Fprintln(out, "no pass has settled yet: is a driver running against this schema?")
	case h.FirstStuckAt != nil:
		fmt.Fprintf(out, "failing since %s (%s passes); the walk waits at the entry named in last_error\n",
			FormatTime(*h.FirstStuckAt), failed)
	default:
		fmt.Fprintln(out, "not failing: the last pass delivered or found nothing to do")
		if h.LastError != nil {
			// A last_error outlives its streak; say it is history.
			when := "before this baton recorded times"
			if h.LastErrorAt != nil {
				when = "at " + FormatTime(*h.LastErrorAt)
			}
			fmt.Fprintf(out, "last_error is from an earlier failing streak, %s\n", when)
		}
	}
	fmt.Fprintf(out, "dead letters waiting for an operator: %d", rep.DeadLettersWaiting)
	if rep.DeadLettersWaiting > 0 {
		fmt.Fprint(out, " (baton outbox dead list)")
	}
	fmt.Fprintln(out)
	return nil
}

// DeadJSON is a dead letter as the commands print it with --json: the
// admin API's form.
type DeadJSON = outbox.DeadLetterJSON

// DeadList lists one page of dead letters, newest parked first, without
// payloads (baton outbox dead list).
func DeadList(ctx context.Context, out io.Writer, target Target, opts outbox.ListOptions, filter outbox.DeadFilter) error {
	db, store, err := openOutbox(ctx, target)
	if err != nil {
		return err
	}
	defer db.Close()
	list, err := outbox.ListDeadMatching(ctx, store, opts, filter)
	if errors.Is(err, outbox.ErrNotFound) {
		return cli.Usagef("--before: no dead letter %s in schema %q (was it deleted by retention?)", opts.Before, db.schema)
	}
	if err != nil {
		return fmt.Errorf("list dead letters: %w", err)
	}
	if target.JSON {
		rows := make([]DeadJSON, len(list))
		for i, d := range list {
			rows[i] = d.JSON()
		}
		return writeJSON(out, rows)
	}
	if len(list) == 0 {
		if opts.Before.IsNil() {
			fmt.Fprintf(out, "no dead letters in schema %q\n", db.schema)
		} else {
			fmt.Fprintln(out, "no more dead letters")
		}
		return nil
	}
	t := newTable(out, "ID", "LANE", "PARKED AT", "REQUEUED AS", "ERROR")
	for _, d := range list {
		requeued := "-"
		if !d.RequeuedAs.IsNil() {
			requeued = d.RequeuedAs.String()
		}
		t.row(d.ID.String(), d.Lane, FormatTime(d.ParkedAt), requeued, cli.Cut(d.Error, 80))
	}
	if err := t.flush(); err != nil {
		return err
	}
	if len(list) == opts.Limit {
		fmt.Fprintf(out, "more may follow: --before %s\n", list[len(list)-1].ID)
	}
	return nil
}

// DeadShow prints one dead letter with its payload (baton outbox dead show).
func DeadShow(ctx context.Context, out io.Writer, target Target, id outbox.ID) error {
	db, store, err := openOutbox(ctx, target)
	if err != nil {
		return err
	}
	defer db.Close()
	d, err := store.GetDead(ctx, id)
	if errors.Is(err, outbox.ErrNotFound) {
		return cli.Usagef("no dead letter %s in schema %q", id, db.schema)
	}
	if err != nil {
		return fmt.Errorf("read dead letter %s: %w", id, err)
	}
	if target.JSON {
		return writeJSON(out, d.JSON())
	}
	t := newTable(out)
	t.row("id", d.ID.String())
	t.row("xid", strconv.FormatUint(d.XID, 10))
	t.row("lane", d.Lane)
	t.row("parked at", FormatTime(d.ParkedAt))
	if d.RequeuedAs.IsNil() {
		t.row("requeued as", "- (waiting: baton outbox dead requeue "+d.ID.String()+")")
	} else {
		t.row("requeued as", d.RequeuedAs.String()+" at "+FormatTime(d.RequeuedAt))
	}
	t.row("error", d.Error)
	if err := t.flush(); err != nil {
		return err
	}
	var pretty bytes.Buffer
	if json.Indent(&pretty, d.Payload, "", "  ") != nil {
		pretty.Reset()
		pretty.Write(d.Payload)
	}
	fmt.Fprintf(out, "payload:\n%s\n", pretty.String())
	return nil
}

// DeadRequeueMany requeues the dead letters cfg chooses, or with cfg.DryRun
// lists them (baton outbox dead requeue without an id).
func DeadRequeueMany(ctx context.Context, out io.Writer, target Target, cfg outbox.RequeueConfig) error {
	db, store, err := openOutbox(ctx, target)
	if err != nil {
		return err
	}
	defer db.Close()
	res, err := outbox.RequeueDead(ctx, store, cfg)
	if err != nil {
		if len(res.Requeued) > 0 && !cfg.DryRun {
			return fmt.Errorf("requeued %d dead letters in %d batches, then: %w", len(res.Requeued), res.Batches, err)
		}
		return fmt.Errorf("requeue dead letters: %w", err)
	}
	if target.JSON {
		return writeJSON(out, res.Report())
	}
	which := "of every lane"
	if cfg.Filter.Lane != "" {
		which = fmt.Sprintf("of lane %q", cfg.Filter.Lane)
	}
	if len(res.Requeued) > 0 {
		t := newTable(out, "DEAD LETTER", "REQUEUED AS")
		for _, q := range res.Requeued {
			as := "- (dry run)"
			if !q.RequeuedAs.IsNil() {
				as = q.RequeuedAs.String()
			}
			t.row(q.ID.String(), as)
		}
		if err := t.flush(); err != nil {
			return err
		}
	}
	refused := ""
	if res.AlreadyRequeued > 0 {
		refused = fmt.Sprintf("; %d requeued before, refused", res.AlreadyRequeued)
	}
	if cfg.DryRun {
		fmt.Fprintf(out, "dry run: would requeue %d dead letters %s in schema %q%s; nothing was changed\n", len(res.Requeued), which, db.schema, refused)
		return nil
	}
	fmt.Fprintf(out, "requeued %d dead letters %s in schema %q, in their order, in %d batches%s\n", len(res.Requeued), which, db.schema, res.Batches, refused)
	return nil
}

// DeadRequeue requeues one dead letter as a new entry at the end of the
// order (baton outbox dead requeue ID).
func DeadRequeue(ctx context.Context, out io.Writer, target Target, id outbox.ID) error {
	db, store, err := openOutbox(ctx, target)
	if err != nil {
		return err
	}
	defer db.Close()
	newID := outbox.NewID()
	err = store.Requeue(ctx, id, newID)
	switch {
	case errors.Is(err, outbox.ErrNotFound):
		return cli.Usagef("no dead letter %s in schema %q", id, db.schema)
	case errors.Is(err, outbox.ErrAlreadyRequeued):
		if d, gerr := store.GetDead(ctx, id); gerr == nil && !d.RequeuedAs.IsNil() {
			return cli.Usagef("dead letter %s was requeued already, as %s at %s", id, d.RequeuedAs, FormatTime(d.RequeuedAt))
		}
		return cli.Usagef("dead letter %s was requeued already", id)
	case err != nil:
		return fmt.Errorf("requeue dead letter %s: %w", id, err)
	}
	if target.JSON {
		return writeJSON(out, map[string]outbox.ID{"id": id, "requeued_as": newID})
	}
	fmt.Fprintf(out, "requeued dead letter %s as entry %s; it is delivered after everything enqueued before it\n", id, newID)
	return nil
}
