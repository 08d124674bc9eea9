package pgxstore

import (
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/baton-go/baton/backends/internal/pgsql"
	"github.com/baton-go/baton/core/outbox"
)

// Names of the shared layer the tests of this package use.
const migrationsTable = pgsql.MigrationsTable

var planIndexes = pgsql.PlanIndexes

var latestVersion = pgsql.Versions()[len(pgsql.Versions())-1]

func leaseError(op string, err error) error { return adapter.MapError(pgsql.AreaLease, op, err) }
func outboxError(op string, err error) error {
	return adapter.MapError(pgsql.AreaOutbox, op, err)
}
func settleError(op string, err error) error { return adapter.MapError(pgsql.AreaSettle, op, err) }
func projectionError(op string, err error) error {
	return adapter.MapError(pgsql.AreaProjection, op, err)
}

// scanOutboxEntry decodes one row of the scan statement.
func scanOutboxEntry(row pgx.CollectableRow) (outbox.Entry, error) {
	var (
		e       outbox.Entry
		id      pgtype.UUID
		tc      pgtype.Text
		payload []byte
	)
	err := row.Scan(&e.XID, &id, &e.Lane, &payload, &e.CreatedAt, &tc)
	e.ID, e.Payload = outbox.ID(id.Bytes), payload
	if tc.Valid {
		e.TraceContext = outbox.DecodeTraceContext(tc.String)
	}
	return e, err
}
