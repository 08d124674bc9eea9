package main

import (
	"github.com/spf13/cobra"

	"github.com/baton-go/baton/backends/pgxstore"
	"github.com/baton-go/baton/cmd/baton/internal/ops"
)

// registerSlot adds the flags of the slot commands: registerDB's, --slot
// and --publication.
func registerSlot(cmd *cobra.Command, t *ops.SlotTarget) {
	registerDB(cmd, &t.Target)
	cmd.Flags().StringVar(&t.Slot, "slot", pgxstore.DefaultSlot, "the replication slot the outbox driver reads (OutboxLogOptions.Slot)")
	cmd.Flags().StringVar(&t.Publication, "publication", pgxstore.DefaultPublication, "the publication of the outbox table (OutboxLogOptions.Publication)")
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
	var f ops.SlotTarget
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
			return ops.SlotStatus(cmd.Context(), cmd.OutOrStdout(), f)
		},
	}
	registerSlot(cmd, &f)
	return cmd
}

func newSlotDropCommand() *cobra.Command {
	var (
		f     ops.SlotTarget
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
			return ops.SlotDrop(cmd.Context(), cmd.OutOrStdout(), f, force)
		},
	}
	registerSlot(cmd, &f)
	cmd.Flags().BoolVar(&force, "force", false, "end the reader of an active slot first")
	return cmd
}
