package postgres

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/baton-go/baton/core/projection"
	"github.com/baton-go/baton/internal/pgrules"
)

// Tables of the projection store, created by the 0004_projections
// migration. Both are UNLOGGED: empty after a crash restart.
const (
	ProjectionHeaderTable = "baton_projection_header"
	ProjectionDetailTable = "baton_projection_detail"
	// ProjectionGenerationSequence numbers the generations; Reserve draws
	// from it. It is an ordinary, logged sequence (numbers never repeat)
	// with the default cache of 1, so a number drawn later on any session
	// is larger.
	ProjectionGenerationSequence = "baton_projection_generation"
)

// ProjectionStoreOptions configure a ProjectionStore. The zero value uses
// the defaults.
type ProjectionStoreOptions struct {
	// Schema holds the projection tables. "" uses the connection's
	// search_path; otherwise every statement names the tables in this
	// schema.
	Schema string
	// Logger receives a Debug record per Replace and per Sweep that
	// deleted something. nil discards them.
	Logger *slog.Logger
}

func (o *ProjectionStoreOptions) validate() error {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Schema != "" {
		return validateSchemaName("ProjectionStoreOptions.Schema", o.Schema)
	}
	return nil
}

// ProjectionStore is the projection.Store over baton_projection_header and
// baton_projection_detail. Create it with NewProjectionStore.
//
// Reserve is one nextval of baton_projection_generation. Replace runs one
// READ COMMITTED transaction, whatever the server's
// default_transaction_isolation: it inserts the generation's header row
// (inactive) under the reserved number, copies the detail rows in with
// COPY, then, holding a transaction-scoped advisory lock keyed by the
// subject, demotes the active generation if it is older and promotes the new
// one if no newer one is active, and commits. The lock is the only
// contended one and is held for the last two statements only; it orders
// concurrent flips of one subject (from any node), and because each
// statement after it reads what committed before it, each flip sees the
// generation the previous one promoted. A newer active generation makes
// Replace roll back with ErrStale. Until the commit nothing of the new
// generation is visible; after it, all of it is.
//
// Every read is one statement, so one snapshot: it sees the active
// generation of before or after a flip, never a mix. Point reads go through
// the partial unique index of active headers and the detail primary key.
//
// Sweep is one statement, in a READ COMMITTED transaction of its own, that
// takes no lock of its own: it deletes the superseded headers it can lock
// without waiting (FOR UPDATE SKIP LOCKED) and their detail rows. Concurrent sweeps divide the work between them,
// and every superseded generation is deleted once.
//
// Everything works through any pooler, PgBouncer's transaction mode
// included.
type ProjectionStore struct {
	pool *pgxpool.Pool
	opts ProjectionStoreOptions

	detailTable pgx.Identifier
	lockPrefix  string // of every advisory lock key: the header table, quoted
	sequence    string // the generation sequence, quoted

	reserveSQL      string
	insertHeaderSQL string
	lockSQL         string
	demoteSQL       string
	promoteSQL      string
	maskSQL         string
	snapshotSQL     string
	generationsSQL  string
	sweepSQL        string
}

var _ projection.Store = (*ProjectionStore)(nil)

// NewProjectionStore returns a ProjectionStore over pool, or an error
// naming the first invalid option. It sends nothing to the database; run
// Migrate (or the migrations) first.
func NewProjectionStore(pool *pgxpool.Pool, opts ProjectionStoreOptions) (*ProjectionStore, error) {
	if pool == nil {
		return nil, errors.New("baton/postgres: NewProjectionStore: the pool is nil")
	}
	if err := opts.validate(); err != nil {
		return nil, err
	}
	header, detail := pgx.Identifier{ProjectionHeaderTable}, pgx.Identifier{ProjectionDetailTable}
	sequence := pgx.Identifier{ProjectionGenerationSequence}
	if opts.Schema != "" {
		header, detail = pgx.Identifier{opts.Schema, ProjectionHeaderTable}, pgx.Identifier{opts.Schema, ProjectionDetailTable}
		sequence = pgx.Identifier{opts.Schema, ProjectionGenerationSequence}
	}
	h, d, q := header.Sanitize(), detail.Sanitize(), sequence.Sanitize()
	return &ProjectionStore{
		pool:        pool,
		opts:        opts,
		detailTable: detail,
		lockPrefix:  h,
		sequence:    q,
		reserveSQL:  `SELECT nextval($1::regclass)`,
		// Only a number the sequence has handed out: one from the
		// future would make every later refresh of the subject stale.
		insertHeaderSQL: `INSERT INTO ` + h + ` (generation, subject_type, subject_id)
SELECT $3::bigint, $1::text, $2::text FROM ` + q + ` WHERE is_called AND $3::bigint <= last_value`,
		lockSQL:        `SELECT pg_advisory_xact_lock($1)`,
		demoteSQL:      `UPDATE ` + h + ` SET active = false WHERE subject_type = $1 AND subject_id = $2 AND active AND generation < $3`,
		promoteSQL:     `UPDATE ` + h + ` SET active = true WHERE generation = $3 AND NOT EXISTS (SELECT FROM ` + h + ` AS a WHERE a.subject_type = $1 AND a.subject_id = $2 AND a.active)`,
		maskSQL:        projectionMaskSQL(h, d),
		snapshotSQL:    projectionSnapshotSQL(h, d),
		generationsSQL: `SELECT generation, active, created_at FROM ` + h + ` WHERE subject_type = $1 AND subject_id = $2 ORDER BY generation`,
		sweepSQL:       projectionSweepSQL(h, d),
	}, nil
}

// projectionMaskSQL reads one resource's mask in the active generation of
// a subject, over the quoted tables h and d. Parameters: $1 subject type,
// $2 subject ID, $3 resource type, $4 resource ID. No row: no active
// generation. A row with a NULL mask: no grant for the resource.
func projectionMaskSQL(h, d string) string {
	return `SELECT d.mask
FROM ` + h + ` AS h
LEFT JOIN ` + d + ` AS d
       ON d.generation = h.generation AND d.resource_type = $3 AND d.resource_id = $4
WHERE h.subject_type = $1 AND h.subject_id = $2 AND h.active`
}

// projectionSnapshotSQL reads the whole active generation of a subject in
// byte order. Parameters: $1 subject type, $2 subject ID. No row: no
// active generation. One row with NULL resource columns: an empty one.
func projectionSnapshotSQL(h, d string) string {
	return `SELECT h.generation, d.resource_type, d.resource_id, d.mask
FROM ` + h + ` AS h
LEFT JOIN ` + d + ` AS d ON d.generation = h.generation
WHERE h.subject_type = $1 AND h.subject_id = $2 AND h.active
ORDER BY d.resource_type, d.resource_id`
}

// projectionSweepSQL deletes every superseded generation nobody else is
// deleting right now, header and detail rows in one statement, and counts
// them. Data-modifying CTEs always run to completion, so the detail rows go
// although the last query reads only the headers. The candidates come from
// the partial index of inactive headers, locked without waiting; the rows
// to delete are then found by key (= ANY of an array, so the plan stays an
// index scan however many generations there are).
func projectionSweepSQL(h, d string) string {
	return `WITH gone AS (
    DELETE FROM ` + h + `
    WHERE generation = ANY (ARRAY(
        SELECT generation FROM ` + h + `
        WHERE NOT active
        ORDER BY generation
        FOR UPDATE SKIP LOCKED))
    RETURNING generation
), details AS (
    DELETE FROM ` + d + ` WHERE generation = ANY (ARRAY(SELECT generation FROM gone))
)
SELECT count(*) FROM gone`
}

// projectionLockKey orders the flips of one subject, across pgx and bun
// nodes (pgrules.ProjectionLockKey).
func (s *ProjectionStore) projectionLockKey(subject projection.Subject) int64 {
	return pgrules.ProjectionLockKey(s.lockPrefix, subject.Type, subject.ID)
}

// Reserve implements projection.Store: one nextval of the generation
// sequence.
func (s *ProjectionStore) Reserve(ctx context.Context) (projection.Generation, error) {
	var gen int64
	if err := s.pool.QueryRow(ctx, s.reserveSQL, s.sequence).Scan(&gen); err != nil {
		return 0, projectionError("reserve a generation", err)
	}
	return projection.Generation(gen), nil
}

// Replace implements projection.Store. Bad input sends nothing; a
// generation the sequence never handed out, one already written, or a
// stale one is rolled back.
func (s *ProjectionStore) Replace(ctx context.Context, subject projection.Subject, generation projection.Generation, grants []projection.Grant) error {
	if err := subject.Validate(); err != nil {
		return err
	}
	if err := projection.ValidateGrants(grants); err != nil {
		return err
	}
	if generation == 0 || generation > math.MaxInt64 {
		return fmt.Errorf("baton/postgres: projection replace: %w: %d is not a generation the sequence hands out; use one from Reserve", projection.ErrInvalidGeneration, generation)
	}
	gen := int64(generation)
	started := time.Now()
	// READ COMMITTED whatever the server's default: the flip's statements
	// must each see the flips committed before the subject's lock was
	// granted, which a transaction-wide snapshot would hide.
	tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	if err != nil {
		return projectionError("replace: begin", err)
	}
	// A no-op after Commit; otherwise nothing of the generation remains.
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()

	inserted, err := tx.Exec(ctx, s.insertHeaderSQL, subject.Type, subject.ID, gen)
	var pgErr *pgconn.PgError
	switch {
	case errors.As(err, &pgErr) && pgErr.Code == "23505": // unique_violation: the primary key
		return fmt.Errorf("baton/postgres: projection replace: %w: generation %d is already written", projection.ErrInvalidGeneration, gen)
	case err != nil:
		return projectionError("replace: insert the header", err)
	case inserted.RowsAffected() != 1:
		return fmt.Errorf("baton/postgres: projection replace: %w: generation %d was never reserved (%s has not handed it out)",
			projection.ErrInvalidGeneration, gen, ProjectionGenerationSequence)
	}
	if len(grants) > 0 {
		n, err := tx.CopyFrom(ctx, s.detailTable, []string{"generation", "resource_type", "resource_id", "mask"}, newDetailRows(gen, grants))
		if err != nil {
			return projectionError("replace: copy the grants", err)
		}
		if n != int64(len(grants)) {
			return fmt.Errorf("baton/postgres: projection replace: copied %d of %d grants", n, len(grants))
		}
	}
	// The flip: one round trip for the lock and both updates.
	b := &pgx.Batch{}
	b.Queue(s.lockSQL, s.projectionLockKey(subject))
	b.Queue(s.demoteSQL, subject.Type, subject.ID, gen)
	b.Queue(s.promoteSQL, subject.Type, subject.ID, gen)
	br := tx.SendBatch(ctx, b)
	_, lockErr := br.Exec()
	_, demoteErr := br.Exec()
	promoted, promoteErr := br.Exec()
	closeErr := br.Close()
	if err := errors.Join(lockErr, demoteErr, promoteErr, closeErr); err != nil {
		return projectionError("replace: flip", err)
	}
	if promoted.RowsAffected() != 1 {
		return fmt.Errorf("baton/postgres: projection replace: %w: %s has a generation reserved after %d active", projection.ErrStale, subject, gen)
	}
	if err := tx.Commit(ctx); err != nil {
		return projectionError("replace: commit", err)
	}
	s.opts.Logger.DebugContext(ctx, "baton: projection replaced",
		"subject", subject.String(), "generation", gen, "grants", len(grants), "took", time.Since(started))
	return nil
}

// detailRows feeds a generation's grants to COPY, converting each mask to
// the signed bigint with the same 64 bits.
type detailRows struct {
	gen    int64
	grants []projection.Grant
	i      int
	row    [4]any
}

func newDetailRows(gen int64, grants []projection.Grant) *detailRows {
	return &detailRows{gen: gen, grants: grants, i: -1}
}

func (r *detailRows) Next() bool {
	r.i++
	return r.i < len(r.grants)
}

// Values returns the same slice every time: CopyFrom encodes a row before
// it asks for the next.
func (r *detailRows) Values() ([]any, error) {
	g := r.grants[r.i]
	r.row = [4]any{r.gen, g.ResourceType, g.ResourceID, maskToBigint(g.Mask)}
	return r.row[:], nil
}

func (r *detailRows) Err() error { return nil }

// maskToBigint and maskFromBigint convert between a Mask and the bigint
// column losslessly: the column holds the mask's bit pattern, so masks with
// bit 63 set are negative numbers in SQL.
func maskToBigint(m projection.Mask) int64   { return int64(m) }
func maskFromBigint(v int64) projection.Mask { return projection.Mask(v) }

// Mask implements projection.Store in one statement.
func (s *ProjectionStore) Mask(ctx context.Context, subject projection.Subject, resourceType, resourceID string) (projection.Mask, bool, error) {
	if err := subject.Validate(); err != nil {
		return 0, false, err
	}
	if err := projection.ValidateResource(resourceType, resourceID); err != nil {
		return 0, false, err
	}
	var mask *int64
	err := s.pool.QueryRow(ctx, s.maskSQL, subject.Type, subject.ID, resourceType, resourceID).Scan(&mask)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return 0, false, noProjection(subject)
	case err != nil:
		return 0, false, projectionError("read a mask", err)
	case mask == nil:
		return 0, false, nil
	}
	return maskFromBigint(*mask), true, nil
}

// Snapshot implements projection.Store in one statement.
func (s *ProjectionStore) Snapshot(ctx context.Context, subject projection.Subject) (projection.Snapshot, error) {
	if err := subject.Validate(); err != nil {
		return projection.Snapshot{}, err
	}
	rows, err := s.pool.Query(ctx, s.snapshotSQL, subject.Type, subject.ID)
	if err != nil {
		return projection.Snapshot{}, projectionError("read a snapshot", err)
	}
	snap := projection.Snapshot{Subject: subject}
	var (
		gen      int64
		typ, id  *string
		mask     *int64
		rowCount int
	)
	_, err = pgx.ForEachRow(rows, []any{&gen, &typ, &id, &mask}, func() error {
		rowCount++
		snap.Generation = projection.Generation(gen)
		if typ != nil {
			snap.Grants = append(snap.Grants, projection.Grant{ResourceType: *typ, ResourceID: *id, Mask: maskFromBigint(*mask)})
		}
		return nil
	})
	if err != nil {
		return projection.Snapshot{}, projectionError("read a snapshot", err)
	}
	if rowCount == 0 {
		return projection.Snapshot{}, noProjection(subject)
	}
	return snap, nil
}

// Generations implements projection.Store. It scans the header table,
// which has one row per subject plus the superseded generations not yet
// swept: an inspection call, not a read path.
func (s *ProjectionStore) Generations(ctx context.Context, subject projection.Subject) ([]projection.GenerationInfo, error) {
	if err := subject.Validate(); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, s.generationsSQL, subject.Type, subject.ID)
	if err != nil {
		return nil, projectionError("list generations", err)
	}
	infos, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (projection.GenerationInfo, error) {
		var info projection.GenerationInfo
		var gen int64
		err := row.Scan(&gen, &info.Active, &info.CreatedAt)
		info.Generation = projection.Generation(gen)
		return info, err
	})
	if err != nil {
		return nil, projectionError("list generations", err)
	}
	return infos, nil
}

// Sweep implements projection.Store in one statement.
func (s *ProjectionStore) Sweep(ctx context.Context) (int, error) {
	var n int64
	// READ COMMITTED whatever the server's default, like Replace: under
	// REPEATABLE READ, a candidate another sweep deleted after this
	// statement's snapshot is a serialization failure instead of a row to
	// skip.
	err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.ReadCommitted}, func(tx pgx.Tx) error {
		return tx.QueryRow(ctx, s.sweepSQL).Scan(&n)
	})
	if err != nil {
		return 0, projectionError("sweep", err)
	}
	if n > 0 {
		s.opts.Logger.DebugContext(ctx, "baton: projection sweep", "generations", n)
	}
	return int(n), nil
}

func noProjection(subject projection.Subject) error {
	return fmt.Errorf("baton/postgres: %w: %s has no active generation (never refreshed, or the UNLOGGED tables were emptied by a crash restart)", projection.ErrNoProjection, subject)
}

// projectionError is the one place where the projection store's driver
// errors are mapped: a missing table or column wraps ErrSchemaMismatch, a
// subject the database refuses wraps projection.ErrInvalidSubject, and
// context errors stay recognizable with errors.Is.
func projectionError(op string, err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "42P01", "42703": // undefined_table, undefined_column
			return fmt.Errorf("baton/postgres: projection %s: %w: %s or %s (run postgres.Migrate, or check ProjectionStoreOptions.Schema and the search_path): %w",
				op, ErrSchemaMismatch, ProjectionHeaderTable, ProjectionDetailTable, err)
		case "23514", "22021": // check_violation, character_not_in_repertoire
			return fmt.Errorf("baton/postgres: projection %s: %w: the database refused it: %w", op, projection.ErrInvalidSubject, err)
		}
	}
	return fmt.Errorf("baton/postgres: projection %s: %w", op, err)
}
