package main

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/baton-go/baton/cmd/baton/internal/ops"
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
		f      ops.Target
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
			return ops.OutboxRebase(cmd.Context(), cmd.OutOrStdout(), f, dryRun)
		},
	}
	registerDB(cmd, &f)
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "compute and print the rebase, write nothing")
	return cmd
}

func newOutboxStatusCommand() *cobra.Command {
	var f ops.Target
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
			return ops.OutboxStatus(cmd.Context(), cmd.OutOrStdout(), f)
		},
	}
	registerDB(cmd, &f)
	return cmd
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
		f      ops.Target
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
			return ops.DeadList(cmd.Context(), cmd.OutOrStdout(), f, opts, outbox.DeadFilter{Lane: lane, State: st})
		},
	}
	registerDB(cmd, &f)
	cmd.Flags().StringVar(&state, "state", "", "list only dead letters in this state: waiting or requeued")
	cmd.Flags().StringVar(&lane, "lane", "", "list only dead letters of this lane")
	cmd.Flags().IntVar(&limit, "limit", outbox.DefaultListLimit, fmt.Sprintf("most dead letters to list, 1 to %d", outbox.MaxListLimit))
	cmd.Flags().StringVar(&before, "before", "", "list only dead letters parked before this one (the last id of the previous page)")
	return cmd
}

func newDeadShowCommand() *cobra.Command {
	var f ops.Target
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
			return ops.DeadShow(cmd.Context(), cmd.OutOrStdout(), f, id)
		},
	}
	registerDB(cmd, &f)
	return cmd
}

func newDeadRequeueCommand() *cobra.Command {
	var (
		f      ops.Target
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
				return ops.DeadRequeue(cmd.Context(), cmd.OutOrStdout(), f, id)
			}
			cfg, err := b.config(time.Now())
			if err != nil {
				return err
			}
			cfg.DryRun = dryRun
			return ops.DeadRequeueMany(cmd.Context(), cmd.OutOrStdout(), f, cfg)
		},
	}
	registerDB(cmd, &f)
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
		return cfg, cli.Usagef("--parked-since %s is not before --parked-before %s: nothing could match", ops.FormatTime(s), ops.FormatTime(e))
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
