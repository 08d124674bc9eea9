package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/baton-go/baton/backends/pgxstore"
	"github.com/baton-go/baton/core/outbox"
	"github.com/baton-go/baton/internal/cli"
)

func newOutboxCommand() *cobra.Command {
	dead := groupCommand("dead", "Dead letters: list, show one, requeue one or many",
		`Dead letters are outbox entries the destination refused for good (a 400 or 409,
or a lane without a processor). They wait here until an operator acts: look at
one with "show", fix the cause, then "requeue" it. A requeue inserts a new entry
with a fresh id, at the end of the order, and records it as requeued_as.`,
		newDeadListCommand(), newDeadShowCommand(), newDeadRequeueCommand())
	return groupCommand("outbox", "Inspect and repair the transactional outbox",
		`Inspect the outbox's health and its dead letters, and requeue them, in the
schema given by --schema (default: the connection's current schema); repair an
outbox restored logically into another cluster with "rebase".`,
		newOutboxStatusCommand(), dead, newOutboxRebaseCommand(), newOutboxSlotCommand())
}

func newOutboxRebaseCommand() *cobra.Command {
	var (
		f      dbFlags
		dryRun bool
	)
	cmd := &cobra.Command{
		Use:   "rebase",
		Short: "Repair an outbox restored logically (pg_dump/pg_restore) into another cluster",
		Long: `An outbox's order is the database's transaction ids (xids). A logical restore
into another cluster copies the old cluster's xids as data, while the new
cluster's counter is wherever it is, usually far lower: entries written since
sort below the stored cursor and would never be delivered. The driver notices
(the cursor is ahead of the transaction counter), refuses to walk and raises a
stuck notice.

rebase repairs it in one transaction: every entry gets a new xid below the
oldest running transaction, in the order the walk must take, and the cursor
moves to match. Entries the old cluster delivered stay behind the new cursor
(retention deletes them); those it had not delivered come next, in their order;
then those written in this database since the restore, in theirs. Entries the
old cluster delivered whose xids happen to be below this database's counter
cannot be told from new ones and are delivered again (delivery is at least once).

With --dry-run it prints what it would do and changes nothing. A cursor that is
not ahead of the counter needs no rebase; the command says so and changes
nothing. A driver running meanwhile finds the cursor moved and goes on from the
new one.`,
		Example: "  baton outbox rebase --postgres postgres://app@db:5432/app --dry-run\n  baton outbox rebase --postgres postgres://app@db:5432/app",
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runOutboxRebase(cmd.Context(), cmd.OutOrStdout(), &f, dryRun)
		},
	}
	f.register(cmd)
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "compute and print the rebase, write nothing")
	return cmd
}

// rebaseReport is what outbox rebase prints with --json.
type rebaseReport struct {
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

func runOutboxRebase(ctx context.Context, out io.Writer, f *dbFlags, dryRun bool) error {
	db, store, err := openOutbox(ctx, f)
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
	rep := rebaseReport{
		Schema: db.schema, DryRun: dryRun, Cursor: cursor(res.Cursor), NewCursor: cursor(res.NewCursor),
		NextXID: strconv.FormatUint(res.NextXID, 10), Delivered: res.Delivered, Pending: res.Pending,
		Written: res.Written, Transactions: res.Transactions,
	}
	if f.json {
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
func openOutbox(ctx context.Context, f *dbFlags) (*database, *pgxstore.OutboxStore, error) {
	db, err := f.open(ctx)
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

func newOutboxStatusCommand() *cobra.Command {
	var f dbFlags
	cmd := &cobra.Command{
		Use:     "status",
		Short:   "Show the outbox's health stamps and waiting dead letters",
		Example: "  baton outbox status --postgres postgres://app@db:5432/app --schema baton\n  BATON_DATABASE_URL=postgres://app@db/app baton outbox status --json",
		Long: `Show the state the outbox driver keeps about itself: the cursor
(last_scanned_xid, last_scanned_id), the last scan, the current failing streak
(failed_attempts, first_stuck_at, last_error) and the notices sent, plus how
many dead letters wait for an operator. "-" marks a stamp never written.

There is deliberately no lag figure: one computed from the cursor is wrong in
both directions. Alert on the stuck notice.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runOutboxStatus(cmd.Context(), cmd.OutOrStdout(), &f)
		},
	}
	f.register(cmd)
	return cmd
}

// statusReport is what outbox status prints with --json.
type statusReport struct {
	Schema             string        `json:"schema"`
	Health             outbox.Health `json:"health"`
	DeadLettersWaiting int           `json:"dead_letters_waiting"`
}

func runOutboxStatus(ctx context.Context, out io.Writer, f *dbFlags) error {
	db, store, err := openOutbox(ctx, f)
	if err != nil {
		return err
	}
	defer db.Close()
	h, err := outbox.ReadHealth(ctx, store)
	if err != nil {
		return fmt.Errorf("read the outbox state: %w", err)
	}
	rep := statusReport{Schema: db.schema, Health: h}
	if err := db.pool.QueryRow(ctx, "SELECT count(*) FROM "+db.table(pgxstore.OutboxDeadTable)+
		" WHERE requeued_as IS NULL").Scan(&rep.DeadLettersWaiting); err != nil {
		return fmt.Errorf("count dead letters: %w", err)
	}
	if f.json {
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
			formatTime(*h.FirstStuckAt), failed)
	default:
		fmt.Fprintln(out, "not failing: the last pass delivered or found nothing to do")
		if h.LastError != nil {
			// A last_error outlives its streak; say it is history.
			when := "before this baton recorded times"
			if h.LastErrorAt != nil {
				when = "at " + formatTime(*h.LastErrorAt)
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

// deadJSON is a dead letter as the commands print it with --json; the
// same fields as the admin handler's GET /dead.
type deadJSON struct {
	ID         outbox.ID       `json:"id"`
	XID        string          `json:"xid"` // a string: xids exceed JSON's safe integers
	Lane       string          `json:"lane"`
	Error      string          `json:"error"`
	ParkedAt   time.Time       `json:"parked_at"`
	RequeuedAs *outbox.ID      `json:"requeued_as"`
	RequeuedAt *time.Time      `json:"requeued_at"`
	Payload    json.RawMessage `json:"payload,omitempty"`
}

func toDeadJSON(d outbox.DeadLetter) deadJSON {
	out := deadJSON{ID: d.ID, XID: strconv.FormatUint(d.XID, 10), Lane: d.Lane, Error: d.Error, ParkedAt: d.ParkedAt}
	if !d.RequeuedAs.IsNil() {
		r, at := d.RequeuedAs, d.RequeuedAt
		out.RequeuedAs, out.RequeuedAt = &r, &at
	}
	if d.Payload != nil {
		out.Payload = json.RawMessage(d.Payload)
	}
	return out
}

// parseDeadID reads a dead letter id argument or flag value.
func parseDeadID(what, s string) (outbox.ID, error) {
	id, err := outbox.ParseID(s)
	if err != nil || id.IsNil() {
		return outbox.NilID, cli.Usagef("%s %q is not a valid id: want a UUID such as 01890a5d-ac96-774b-bcce-b302099a8057", what, s)
	}
	return id, nil
}

func newDeadListCommand() *cobra.Command {
	var (
		f      dbFlags
		limit  int
		before string
		lane   string
		state  string
	)
	cmd := &cobra.Command{
		Use:     "list",
		Short:   "List dead letters, newest parked first, without payloads",
		Example: "  baton outbox dead list --limit 20\n  baton outbox dead list --limit 20 --before 01890a5d-ac96-774b-bcce-b302099a8057\n  baton outbox dead list --state waiting --lane graph.metadata",
		Long: `List dead letters, newest parked first, without their payloads (see
"baton outbox dead show ID"). Page with --limit and --before: pass the last id
of a page as --before to get the next one. --state waiting lists those no one
has requeued yet, --state requeued those already replayed; --lane one lane's.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if limit < 1 || limit > outbox.MaxListLimit {
				return cli.Usagef("--limit is %d; it must be from 1 to %d", limit, outbox.MaxListLimit)
			}
			st, err := outbox.ParseDeadState(state)
			if err != nil {
				return cli.Usagef("--state is %q; it must be %s or %s", state, outbox.DeadWaiting, outbox.DeadRequeued)
			}
			opts := outbox.ListOptions{Limit: limit}
			if before != "" {
				id, err := parseDeadID("--before", before)
				if err != nil {
					return err
				}
				opts.Before = id
			}
			return runDeadList(cmd.Context(), cmd.OutOrStdout(), &f, opts, outbox.DeadFilter{Lane: lane, State: st})
		},
	}
	f.register(cmd)
	cmd.Flags().StringVar(&state, "state", "", "list only dead letters in this state: waiting or requeued")
	cmd.Flags().StringVar(&lane, "lane", "", "list only dead letters of this lane")
	cmd.Flags().IntVar(&limit, "limit", outbox.DefaultListLimit, fmt.Sprintf("most dead letters to list, 1 to %d", outbox.MaxListLimit))
	cmd.Flags().StringVar(&before, "before", "", "list only dead letters parked before this one (the last id of the previous page)")
	return cmd
}

func runDeadList(ctx context.Context, out io.Writer, f *dbFlags, opts outbox.ListOptions, filter outbox.DeadFilter) error {
	db, store, err := openOutbox(ctx, f)
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
	if f.json {
		rows := make([]deadJSON, len(list))
		for i, d := range list {
			rows[i] = toDeadJSON(d)
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
		t.row(d.ID.String(), d.Lane, formatTime(d.ParkedAt), requeued, cli.Cut(d.Error, 80))
	}
	if err := t.flush(); err != nil {
		return err
	}
	if len(list) == opts.Limit {
		fmt.Fprintf(out, "more may follow: --before %s\n", list[len(list)-1].ID)
	}
	return nil
}

func newDeadShowCommand() *cobra.Command {
	var f dbFlags
	cmd := &cobra.Command{
		Use:   "show ID",
		Short: "Show one dead letter with its payload",
		Long: `Show one dead letter: its lane, the reason it was parked (the destination's
answer), when, whether it was requeued and as which entry, and its payload.`,
		Example: "  baton outbox dead show 01890a5d-ac96-774b-bcce-b302099a8057",
		Args:    exactArgs(1, "one dead letter id"),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := parseDeadID("dead letter id", args[0])
			if err != nil {
				return err
			}
			return runDeadShow(cmd.Context(), cmd.OutOrStdout(), &f, id)
		},
	}
	f.register(cmd)
	return cmd
}

func runDeadShow(ctx context.Context, out io.Writer, f *dbFlags, id outbox.ID) error {
	db, store, err := openOutbox(ctx, f)
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
	if f.json {
		return writeJSON(out, toDeadJSON(d))
	}
	t := newTable(out)
	t.row("id", d.ID.String())
	t.row("xid", strconv.FormatUint(d.XID, 10))
	t.row("lane", d.Lane)
	t.row("parked at", formatTime(d.ParkedAt))
	if d.RequeuedAs.IsNil() {
		t.row("requeued as", "- (waiting: baton outbox dead requeue "+d.ID.String()+")")
	} else {
		t.row("requeued as", d.RequeuedAs.String()+" at "+formatTime(d.RequeuedAt))
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

func newDeadRequeueCommand() *cobra.Command {
	var (
		f      dbFlags
		b      bulkFlags
		dryRun bool
	)
	cmd := &cobra.Command{
		Use:   "requeue [ID]",
		Short: "Requeue one dead letter, or many at once, as new entries at the end of the order",
		Long: `Insert the dead letter's lane and payload as a new outbox entry with a fresh
id, and record that id as the dead letter's requeued_as, in one transaction.
The new entry goes to the end of the order: it is delivered after everything
enqueued before it. A dead letter can be requeued once.

Without an ID it requeues every dead letter that --lane (or --all) and the
other filters choose, oldest first in the outbox's order, so the replay keeps
their relative order; it works in transactions of --batch dead letters each.
A dead letter requeued before is refused and counted, never an error for the
rest. --dry-run lists what it would requeue and changes nothing.

Fix what made the destination refuse them first: a requeued entry that is
refused again is parked again, as a new dead letter.`,
		Example: `  baton outbox dead requeue 01890a5d-ac96-774b-bcce-b302099a8057
  baton outbox dead requeue --lane graph.metadata --waiting --dry-run
  baton outbox dead requeue --lane graph.metadata --waiting --parked-since 2h`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 1 {
				return cli.Usagef("%s takes at most one dead letter id, got %d arguments", cmd.CommandPath(), len(args))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 1 {
				if b.set(cmd) || dryRun {
					return cli.Usagef("a dead letter id requeues that one: --lane, --all, --waiting, --parked-since, --parked-before, --limit, --batch and --dry-run are for requeueing many, without an id")
				}
				id, err := parseDeadID("dead letter id", args[0])
				if err != nil {
					return err
				}
				return runDeadRequeue(cmd.Context(), cmd.OutOrStdout(), &f, id)
			}
			cfg, err := b.config(time.Now())
			if err != nil {
				return err
			}
			cfg.DryRun = dryRun
			return runDeadRequeueMany(cmd.Context(), cmd.OutOrStdout(), &f, cfg)
		},
	}
	f.register(cmd)
	b.register(cmd)
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "list the dead letters it would requeue, and change nothing")
	return cmd
}

// bulkFlags choose the dead letters of a bulk requeue.
type bulkFlags struct {
	lane, since, before string
	all, waiting        bool
	limit, batch        int
}

func (b *bulkFlags) register(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&b.lane, "lane", "", "requeue the dead letters of this lane")
	fl.BoolVar(&b.all, "all", false, "requeue the dead letters of every lane")
	fl.BoolVar(&b.waiting, "waiting", false, "skip dead letters requeued before, rather than count them as refused")
	fl.StringVar(&b.since, "parked-since", "", "only dead letters parked at or after this time: RFC 3339, or a duration ago such as 2h")
	fl.StringVar(&b.before, "parked-before", "", "only dead letters parked before this time: RFC 3339, or a duration ago such as 30m")
	fl.IntVar(&b.limit, "limit", 0, "most dead letters to take, requeued or refused (0: no bound)")
	fl.IntVar(&b.batch, "batch", outbox.DefaultRequeueBatch, fmt.Sprintf("dead letters per transaction, 1 to %d", outbox.MaxRequeueBatch))
}

// set reports whether any bulk flag was given.
func (b *bulkFlags) set(cmd *cobra.Command) bool {
	for _, name := range []string{"lane", "all", "waiting", "parked-since", "parked-before", "limit", "batch"} {
		if cmd.Flags().Changed(name) {
			return true
		}
	}
	return false
}

func (b *bulkFlags) config(now time.Time) (outbox.RequeueConfig, error) {
	switch {
	case b.lane == "" && !b.all:
		return outbox.RequeueConfig{}, cli.Usagef("say which dead letters to requeue: a dead letter id, --lane LANE, or --all")
	case b.lane != "" && b.all:
		return outbox.RequeueConfig{}, cli.Usagef("--lane and --all exclude each other")
	case b.limit < 0:
		return outbox.RequeueConfig{}, cli.Usagef("--limit is %d; it must not be negative (0 for no bound)", b.limit)
	case b.batch < 1 || b.batch > outbox.MaxRequeueBatch:
		return outbox.RequeueConfig{}, cli.Usagef("--batch is %d; it must be from 1 to %d", b.batch, outbox.MaxRequeueBatch)
	}
	cfg := outbox.RequeueConfig{Filter: outbox.RequeueFilter{Lane: b.lane, WaitingOnly: b.waiting}, Limit: b.limit, BatchSize: b.batch}
	var err error
	if cfg.Filter.ParkedSince, err = parseWhen("--parked-since", b.since, now); err != nil {
		return cfg, err
	}
	if cfg.Filter.ParkedBefore, err = parseWhen("--parked-before", b.before, now); err != nil {
		return cfg, err
	}
	if s, e := cfg.Filter.ParkedSince, cfg.Filter.ParkedBefore; !s.IsZero() && !e.IsZero() && !s.Before(e) {
		return cfg, cli.Usagef("--parked-since %s is not before --parked-before %s: nothing could match", formatTime(s), formatTime(e))
	}
	return cfg, nil
}

// parseWhen reads a time flag: RFC 3339, or a duration before now.
func parseWhen(flag, v string, now time.Time) (time.Time, error) {
	if v == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
		return t, nil
	}
	if d, err := time.ParseDuration(v); err == nil && d >= 0 {
		return now.Add(-d), nil
	}
	return time.Time{}, cli.Usagef("%s %q is neither an RFC 3339 time (2026-05-01T12:00:00Z) nor a duration ago (2h)", flag, v)
}

func runDeadRequeueMany(ctx context.Context, out io.Writer, f *dbFlags, cfg outbox.RequeueConfig) error {
	db, store, err := openOutbox(ctx, f)
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
	if f.json {
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

func runDeadRequeue(ctx context.Context, out io.Writer, f *dbFlags, id outbox.ID) error {
	db, store, err := openOutbox(ctx, f)
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
			return cli.Usagef("dead letter %s was requeued already, as %s at %s", id, d.RequeuedAs, formatTime(d.RequeuedAt))
		}
		return cli.Usagef("dead letter %s was requeued already", id)
	case err != nil:
		return fmt.Errorf("requeue dead letter %s: %w", id, err)
	}
	if f.json {
		return writeJSON(out, map[string]outbox.ID{"id": id, "requeued_as": newID})
	}
	fmt.Fprintf(out, "requeued dead letter %s as entry %s; it is delivered after everything enqueued before it\n", id, newID)
	return nil
}
