package main

import (
	"context"
	"fmt"
	"io"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/baton-go/baton/backends/pgxstore"
	"github.com/baton-go/baton/core/outbox"
	"github.com/baton-go/baton/internal/cli"
)

// slotFlags name the logical source's slot and publication.
type slotFlags struct {
	dbFlags
	slot, publication string
}

func (f *slotFlags) register(cmd *cobra.Command) {
	f.dbFlags.register(cmd)
	cmd.Flags().StringVar(&f.slot, "slot", pgxstore.DefaultSlot, "the replication slot the outbox driver reads (OutboxLogOptions.Slot)")
	cmd.Flags().StringVar(&f.publication, "publication", pgxstore.DefaultPublication, "the publication of the outbox table (OutboxLogOptions.Publication)")
}

func newOutboxSlotCommand() *cobra.Command {
	return groupCommand("slot", "The replication slot of the outbox's logical source: status, drop",
		`A driver reading the outbox from the log (outbox.Config.Log) holds a logical
replication slot. The server keeps every byte of WAL the slot has not confirmed,
for as long as the slot exists, read or not: a slot nobody reads fills the disk,
unless max_slot_wal_keep_size bounds it, in which case the slot is invalidated
when it is hit and the driver stops with a stuck notice. "status" shows how much
WAL the slot holds; "drop" drops it (see docs/outbox.md, "Choosing a source").`,
		newSlotStatusCommand(), newSlotDropCommand())
}

func newSlotStatusCommand() *cobra.Command {
	var f slotFlags
	cmd := &cobra.Command{
		Use:     "status",
		Short:   "Show the slot: its reader, the WAL it retains, whether it is still valid",
		Example: "  baton outbox slot status --postgres postgres://app@db:5432/app\n  baton outbox slot status --slot baton_outbox_orders --json",
		Long: `Show the outbox's replication slot as the server sees it: whether a leader is
reading it (and its backend pid), its wal_status (reserved and extended are
fine, unreserved is at risk, lost means invalidated), the positions it keeps
(restart_lsn, confirmed_flush_lsn), the WAL it retains in bytes, how much more
may be written before max_slot_wal_keep_size invalidates it, the publication,
and the log position the driver settled last.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runSlotStatus(cmd.Context(), cmd.OutOrStdout(), &f)
		},
	}
	f.register(cmd)
	return cmd
}

// slotReport is what outbox slot status prints with --json.
type slotReport struct {
	Schema             string  `json:"schema"`
	Slot               string  `json:"slot"`
	Exists             bool    `json:"exists"`
	Active             bool    `json:"active"`
	ActivePID          *int32  `json:"active_pid"`
	WALStatus          string  `json:"wal_status"`
	RestartLSN         string  `json:"restart_lsn"`
	ConfirmedFlushLSN  string  `json:"confirmed_flush_lsn"`
	RetainedWALBytes   *int64  `json:"retained_wal_bytes"`
	SafeWALSize        *int64  `json:"safe_wal_size"`
	MaxSlotWALKeepSize string  `json:"max_slot_wal_keep_size"`
	Publication        string  `json:"publication"`
	PublicationExists  bool    `json:"publication_exists"`
	Source             *string `json:"source"`
	SettledLogPosition string  `json:"settled_log_position"`
}

// openLog opens the database and the log store the flags name.
func openLog(ctx context.Context, f *slotFlags) (*database, *pgxstore.OutboxLogStore, error) {
	db, _, err := openOutbox(ctx, &f.dbFlags)
	if err != nil {
		return nil, nil, err
	}
	st, err := pgxstore.NewOutboxLogStore(db.pool, pgxstore.OutboxLogOptions{Schema: db.schema, Slot: f.slot, Publication: f.publication})
	if err != nil {
		db.Close()
		return nil, nil, cli.Usagef("%v", err)
	}
	return db, st, nil
}

func runSlotStatus(ctx context.Context, out io.Writer, f *slotFlags) error {
	db, st, err := openLog(ctx, f)
	if err != nil {
		return err
	}
	defer db.Close()
	s, ok, err := st.SlotStatus(ctx)
	if err != nil {
		return fmt.Errorf("read the slot: %w", err)
	}
	rep := slotReport{Schema: db.schema, Slot: f.slot, Exists: ok, Publication: f.publication}
	if ok {
		rep.Active, rep.ActivePID, rep.WALStatus = s.Active, s.ActivePID, s.WALStatus
		rep.RestartLSN, rep.ConfirmedFlushLSN = s.RestartLSN, s.ConfirmedFlushLSN
		rep.RetainedWALBytes, rep.SafeWALSize, rep.MaxSlotWALKeepSize = s.RetainedBytes, s.SafeWALSize, s.MaxSlotWALKeepSize
		rep.PublicationExists, rep.SettledLogPosition = s.PublicationExists, s.SettledLogPosition
	}
	if state, err := st.State(ctx); err == nil {
		if v, has := state[outbox.KeySource]; has {
			rep.Source = &v
		}
	}
	if f.json {
		return writeJSON(out, rep)
	}
	if !ok {
		fmt.Fprintf(out, "no replication slot %q: no driver has read the outbox of schema %q from the log (or its slot was dropped)\n", f.slot, db.schema)
		return nil
	}
	fmt.Fprintf(out, "replication slot %q (outbox in schema %q)\n", f.slot, db.schema)
	bytes := func(n *int64) string {
		if n == nil {
			return "-"
		}
		return strconv.FormatInt(*n, 10) + " bytes"
	}
	reader := "none"
	if rep.ActivePID != nil {
		reader = fmt.Sprintf("backend %d", *rep.ActivePID)
	}
	t := newTable(out, "FIELD", "VALUE")
	t.row("reader", reader)
	t.row("wal_status", rep.WALStatus)
	t.row("restart_lsn", rep.RestartLSN)
	t.row("confirmed_flush_lsn", rep.ConfirmedFlushLSN)
	t.row("retained WAL", bytes(rep.RetainedWALBytes))
	t.row("safe_wal_size", bytes(rep.SafeWALSize))
	t.row("max_slot_wal_keep_size", rep.MaxSlotWALKeepSize)
	t.row("publication", fmt.Sprintf("%s (exists: %v)", rep.Publication, rep.PublicationExists))
	t.row("source", formatStringPtr(rep.Source))
	t.row("settled log position", orDash(rep.SettledLogPosition))
	if err := t.flush(); err != nil {
		return err
	}
	switch {
	case rep.WALStatus == "lost":
		fmt.Fprintln(out, "the slot is invalidated: the WAL it needs is gone. Drop it (baton outbox slot drop) and the driver creates it again, walking the table from the settled cursor first; or run the driver without the log.")
	case !rep.PublicationExists:
		fmt.Fprintln(out, "the publication is missing: the slot cannot be read past its drop. Drop the slot and the driver creates both again.")
	case rep.ActivePID == nil:
		fmt.Fprintln(out, "nobody reads the slot: it retains WAL until a driver reads it or it is dropped.")
	}
	return nil
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func newSlotDropCommand() *cobra.Command {
	var (
		f     slotFlags
		force bool
	)
	cmd := &cobra.Command{
		Use:   "drop",
		Short: "Drop the slot, so that the server may forget the WAL it retains",
		Long: `Drop the outbox's replication slot. Do it when the slot was invalidated, when
its publication was dropped, or when the deployment went back to the walk for
good. A slot a leader is reading is refused unless --force, which ends that
reader first.

A driver reading the log creates the slot again at its next start, and, since
the new slot begins after the settled position, walks the table from the
settled cursor first: nothing is lost; entries settled since the last passed
mark are delivered again.`,
		Example: "  baton outbox slot drop --postgres postgres://app@db:5432/app\n  baton outbox slot drop --slot baton_outbox_orders --force",
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			db, st, err := openLog(cmd.Context(), &f)
			if err != nil {
				return err
			}
			defer db.Close()
			if _, ok, err := st.SlotStatus(cmd.Context()); err != nil {
				return fmt.Errorf("read the slot: %w", err)
			} else if !ok {
				return cli.Usagef("there is no replication slot %q", f.slot)
			}
			if err := st.DropSlot(cmd.Context(), force); err != nil {
				return err
			}
			if f.json {
				return writeJSON(cmd.OutOrStdout(), map[string]any{"slot": f.slot, "dropped": true})
			}
			fmt.Fprintf(cmd.OutOrStdout(), "dropped the replication slot %q\n", f.slot)
			return nil
		},
	}
	f.register(cmd)
	cmd.Flags().BoolVar(&force, "force", false, "end the reader of an active slot first")
	return cmd
}
