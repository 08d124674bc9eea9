package outboxtest

import (
	"context"
	"regexp"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/baton-go/baton/core/outbox"
)

// The oracle of commit order: a second logical slot, with the
// test_decoding plugin, decoding the same commits as the logical source.

// CreateOracle creates a test_decoding slot named slot; entries committed
// from then on are in what CommitOrder reads.
func CreateOracle(ctx context.Context, pool *pgxpool.Pool, slot string) error {
	_, err := pool.Exec(ctx, `SELECT pg_create_logical_replication_slot($1, 'test_decoding')`, slot)
	return err
}

var testDecodingID = regexp.MustCompile(`^table (\S+)\.baton_outbox: INSERT: .*\bid\[uuid\]:'([0-9a-f-]{36})'`)

// CommitOrder reads the test_decoding slot until it has nothing more to
// give, and returns the ids that committed transactions inserted into
// schema's outbox, in commit order (then in the order each transaction
// wrote them). Decoding reads flushed WAL only, and the test servers
// commit without waiting for the flush, so it first commits one
// transaction that waits, which flushes everything before it.
func CommitOrder(ctx context.Context, pool *pgxpool.Pool, slot, schema string) ([]outbox.ID, error) {
	if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `SET LOCAL synchronous_commit = on; SELECT pg_current_xact_id()`)
		return err
	}); err != nil {
		return nil, err
	}
	var ids []outbox.ID
	for quiet := 0; quiet < 3; {
		rows, err := pool.Query(ctx, `SELECT data FROM pg_logical_slot_get_changes($1, NULL, NULL, 'skip-empty-xacts', '1')`, slot)
		if err != nil {
			return nil, err
		}
		// Only the schema's outbox entries count as news: a driver's own
		// settlements keep committing other changes.
		n := 0
		for rows.Next() {
			var line string
			if err := rows.Scan(&line); err != nil {
				rows.Close()
				return nil, err
			}
			m := testDecodingID.FindStringSubmatch(line)
			if m == nil || m[1] != schema {
				continue
			}
			id, err := outbox.ParseID(m[2])
			if err != nil {
				rows.Close()
				return nil, err
			}
			ids = append(ids, id)
			n++
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, err
		}
		if n > 0 {
			quiet = 0
			continue
		}
		quiet++
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(300 * time.Millisecond):
		}
	}
	return ids, nil
}
