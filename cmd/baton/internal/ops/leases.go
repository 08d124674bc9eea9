package ops

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/baton-go/baton/backends/pgxstore"
	"github.com/baton-go/baton/core/lease"
	"github.com/baton-go/baton/internal/cli"
)

// LeaseJSON is a lease as printed with --json.
type LeaseJSON struct {
	Role          string    `json:"role"`
	Holder        string    `json:"holder"`
	HolderAddress string    `json:"holder_address"`
	Token         string    `json:"token"` // a string: tokens are 64-bit
	Live          bool      `json:"live"`
	AcquiredAt    time.Time `json:"acquired_at"`
	RenewedAt     time.Time `json:"renewed_at"`
	ExpiresAt     time.Time `json:"expires_at"`
	ExpiresInMS   int64     `json:"expires_in_ms"`
}

// Leases lists every role lease: holder, address, fencing token, expiry.
func Leases(ctx context.Context, out io.Writer, target Target) error {
	db, err := target.open(ctx)
	if err != nil {
		return err
	}
	defer db.Close()
	if err := db.requireTables(ctx, pgxstore.LeaseTable); err != nil {
		return err
	}
	store, err := pgxstore.NewLeaseStore(db.pool, pgxstore.LeaseStoreOptions{Schema: db.schema})
	if err != nil {
		return schemaNameError(err)
	}
	// Expiry judged by the database's clock, never this machine's, in the
	// order a person reads: devices:partition-2 before partition-10.
	rows, err := lease.ListLeases(ctx, store)
	if err != nil {
		return fmt.Errorf("read %s.%s: %w", db.schema, pgxstore.LeaseTable, err)
	}
	if target.JSON {
		list := make([]LeaseJSON, len(rows))
		for i, r := range rows {
			list[i] = LeaseJSON{
				Role: r.Role, Holder: r.Holder, HolderAddress: r.HolderAddress,
				Token: strconv.FormatUint(r.Token, 10), Live: r.Live,
				AcquiredAt: r.AcquiredAt, RenewedAt: r.RenewedAt, ExpiresAt: r.ExpiresAt,
				ExpiresInMS: r.Remaining.Milliseconds(),
			}
		}
		return writeJSON(out, list)
	}
	if len(rows) == 0 {
		fmt.Fprintf(out, "no role leases in schema %q\n", db.schema)
		return nil
	}
	t := newTable(out, "ROLE", "HOLDER", "ADDRESS", "TOKEN", "STATE", "EXPIRES AT")
	for _, r := range rows {
		state := "free (expired " + cli.FormatDuration(-r.Remaining) + " ago)"
		if r.Live {
			state = "held (" + cli.FormatDuration(r.Remaining) + " left)"
		}
		addr := r.HolderAddress
		if addr == "" {
			addr = "-"
		}
		t.row(r.Role, r.Holder, addr, strconv.FormatUint(r.Token, 10), state, FormatTime(r.ExpiresAt))
	}
	return t.flush()
}
