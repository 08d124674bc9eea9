package ops

import (
	"context"
	"fmt"
	"io"
	"strconv"

	"github.com/baton-go/baton/backends/pgxstore"
	"github.com/baton-go/baton/core/outbox"
	"github.com/baton-go/baton/internal/cli"
)

// SlotTarget is a Target and the logical source's replication slot and
// publication in it.
type SlotTarget struct {
	Target
	Slot, Publication string
}

// SlotReport is what outbox slot status prints with --json.
type SlotReport struct {
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

// openLog opens the database and the log store target names.
func openLog(ctx context.Context, target SlotTarget) (*database, *pgxstore.OutboxLogStore, error) {
	db, _, err := openOutbox(ctx, target.Target)
	if err != nil {
		return nil, nil, err
	}
	st, err := pgxstore.NewOutboxLogStore(db.pool, pgxstore.OutboxLogOptions{Schema: db.schema, Slot: target.Slot, Publication: target.Publication})
	if err != nil {
		db.Close()
		return nil, nil, cli.Usagef("%v", err)
	}
	return db, st, nil
}

// SlotStatus prints the replication slot of the outbox's logical source
// as the server sees it (baton outbox slot status).
func SlotStatus(ctx context.Context, out io.Writer, target SlotTarget) error {
	db, st, err := openLog(ctx, target)
	if err != nil {
		return err
	}
	defer db.Close()
	s, ok, err := st.SlotStatus(ctx)
	if err != nil {
		return fmt.Errorf("read the slot: %w", err)
	}
	rep := SlotReport{Schema: db.schema, Slot: target.Slot, Exists: ok, Publication: target.Publication}
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
	if target.JSON {
		return writeJSON(out, rep)
	}
	if !ok {
		fmt.Fprintf(out, "no replication slot %q: no driver has read the outbox of schema %q from the log (or its slot was dropped)\n", target.Slot, db.schema)
		return nil
	}
	fmt.Fprintf(out, "replication slot %q (outbox in schema %q)\n", target.Slot, db.schema)
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

// SlotDrop drops the replication slot; one a reader holds only with force,
// which ends that reader first (baton outbox slot drop).
func SlotDrop(ctx context.Context, out io.Writer, target SlotTarget, force bool) error {
	db, st, err := openLog(ctx, target)
	if err != nil {
		return err
	}
	defer db.Close()
	if _, ok, err := st.SlotStatus(ctx); err != nil {
		return fmt.Errorf("read the slot: %w", err)
	} else if !ok {
		return cli.Usagef("there is no replication slot %q", target.Slot)
	}
	if err := st.DropSlot(ctx, force); err != nil {
		return err
	}
	if target.JSON {
		return writeJSON(out, map[string]any{"slot": target.Slot, "dropped": true})
	}
	fmt.Fprintf(out, "dropped the replication slot %q\n", target.Slot)
	return nil
}
