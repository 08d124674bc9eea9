package pgsql

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"time"

	"github.com/baton-go/baton/core/projection"
)

// ProjectionStoreOptions configure a ProjectionStore, of either adapter.
// The zero value uses the defaults.
type ProjectionStoreOptions struct {
	// Schema holds the projection tables. "" uses the connection's
	// search_path; otherwise every statement names the tables in this
	// schema.
	Schema string
	// Logger receives a Debug record per Replace and per Sweep that
	// deleted something. nil discards them.
	Logger *slog.Logger
}

// withDefaults returns a copy of c with its zero fields set to the
// defaults.
func (c ProjectionStoreOptions) withDefaults() ProjectionStoreOptions {
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// validate checks options that have their defaults.
func (c ProjectionStoreOptions) validate() error {
	if c.Schema != "" {
		return ValidateSchemaName("ProjectionStoreOptions.Schema", c.Schema)
	}
	return nil
}

// ProjectionStore is the projection.Store over baton_projection_header and
// baton_projection_detail.
//
// Reserve is one nextval of baton_projection_generation. Replace runs one
// READ COMMITTED transaction, whatever the server's
// default_transaction_isolation: it inserts the generation's header row
// (inactive) under the reserved number, loads the detail rows (COPY where
// the adapter has it, else one INSERT from arrays), then, holding a
// transaction-scoped advisory lock keyed by the subject, demotes the active
// generation if it is older and promotes the new one if no newer one is
// active, and commits. The lock is the only contended one and is held for
// the last two statements only; it orders concurrent flips of one subject
// (from any node, of either adapter), and because each statement after it
// reads what committed before it, each flip sees the generation the
// previous one promoted. A newer active generation makes Replace roll back
// with ErrStale. Until the commit nothing of the new generation is
// visible; after it, all of it is.
//
// Every read is one statement, so one snapshot: it sees the active
// generation of before or after a flip, never a mix. Point reads go through
// the partial unique index of active headers and the detail primary key.
//
// Sweep is one statement, in a READ COMMITTED transaction of its own, that
// takes no lock of its own: it deletes the superseded headers it can lock
// without waiting (FOR UPDATE SKIP LOCKED) and their detail rows.
// Concurrent sweeps divide the work between them, and every superseded
// generation is deleted once.
//
// Everything works through any pooler, PgBouncer's transaction mode
// included.
type ProjectionStore struct {
	db     DB
	a      Adapter
	logger *slog.Logger

	detail     [2]string // schema and name, for COPY
	lockPrefix string    // of every advisory lock key: the header table, quoted
	sequence   string    // the generation sequence, quoted

	insertHeaderSQL, insertDetailsSQL, demoteSQL, promoteSQL string
	maskSQL, snapshotSQL, generationsSQL, sweepSQL           string
}

var _ projection.Store = (*ProjectionStore)(nil)

// NewProjectionStore returns a ProjectionStore over db, or an error naming
// the first invalid option. It sends nothing.
func NewProjectionStore(db DB, a Adapter, c ProjectionStoreOptions) (*ProjectionStore, error) {
	c = c.withDefaults()
	if err := c.validate(); err != nil {
		return nil, err
	}
	h, d, q := qualified(c.Schema, ProjectionHeaderTable), qualified(c.Schema, ProjectionDetailTable), qualified(c.Schema, ProjectionGenerationSequence)
	return &ProjectionStore{
		db: db, a: a, logger: c.Logger,
		detail:     [2]string{c.Schema, ProjectionDetailTable},
		lockPrefix: h,
		sequence:   q,
		// Only a number the sequence has handed out: one from the
		// future would make every later refresh of the subject stale.
		insertHeaderSQL: `INSERT INTO ` + h + ` (generation, subject_type, subject_id)
SELECT $3::bigint, $1::text, $2::text FROM ` + q + ` WHERE is_called AND $3::bigint <= last_value`,
		insertDetailsSQL: `INSERT INTO ` + d + ` (generation, resource_type, resource_id, mask)
SELECT $1, g.resource_type, g.resource_id, g.mask FROM unnest($2::text[], $3::text[], $4::bigint[]) AS g (resource_type, resource_id, mask)`,
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

// MaskSQL and SnapshotSQL are the point reads, for plan tests.
func (s *ProjectionStore) MaskSQL() string     { return s.maskSQL }
func (s *ProjectionStore) SnapshotSQL() string { return s.snapshotSQL }

// SweepSQL is the sweep, for plan tests.
func (s *ProjectionStore) SweepSQL() string { return s.sweepSQL }

// Reserve implements projection.Store: one nextval of the generation
// sequence.
func (s *ProjectionStore) Reserve(ctx context.Context) (projection.Generation, error) {
	var gen int64
	if err := s.db.QueryRow(ctx, `SELECT nextval($1::regclass)`, s.sequence).Scan(&gen); err != nil {
		return 0, s.a.MapError(AreaProjection, "reserve a generation", err)
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
		return s.a.errorf("projection replace: %w: %d is not a generation the sequence hands out; use one from Reserve", projection.ErrInvalidGeneration, generation)
	}
	gen := int64(generation)
	started := time.Now()
	// READ COMMITTED whatever the server's default: the flip's statements
	// must each see the flips committed before the subject's lock was
	// granted, which a transaction-wide snapshot would hide.
	tx, err := s.db.Begin(ctx)
	if err != nil {
		return s.a.MapError(AreaProjection, "replace: begin", err)
	}
	// A no-op after Commit; otherwise nothing of the generation remains.
	defer rollback(ctx, tx)

	inserted, err := tx.Exec(ctx, s.insertHeaderSQL, subject.Type, subject.ID, gen)
	switch {
	case sqlState(err) == "23505": // unique_violation: the primary key
		return s.a.errorf("projection replace: %w: generation %d is already written", projection.ErrInvalidGeneration, gen)
	case err != nil:
		return s.a.MapError(AreaProjection, "replace: insert the header", err)
	case inserted != 1:
		return s.a.errorf("projection replace: %w: generation %d was never reserved (%s has not handed it out)",
			projection.ErrInvalidGeneration, gen, ProjectionGenerationSequence)
	}
	if len(grants) > 0 {
		n, err := s.insertDetails(ctx, tx, gen, grants)
		if err != nil {
			return s.a.MapError(AreaProjection, "replace: load the grants", err)
		}
		if n != int64(len(grants)) {
			return s.a.errorf("projection replace: loaded %d of %d grants", n, len(grants))
		}
	}
	// The flip, in one round trip where the adapter can: the subject's
	// lock, then demote an older active generation and promote this one
	// unless a newer one is active, each a statement of its own so each
	// sees what committed before it.
	counts, err := execAll(ctx, tx,
		Statement{`SELECT pg_advisory_xact_lock($1)`, []any{ProjectionLockKey(s.lockPrefix, subject.Type, subject.ID)}},
		Statement{s.demoteSQL, []any{subject.Type, subject.ID, gen}},
		Statement{s.promoteSQL, []any{subject.Type, subject.ID, gen}})
	if err != nil {
		return s.a.MapError(AreaProjection, "replace: flip", err)
	}
	if counts[2] != 1 {
		return s.a.errorf("projection replace: %w: %s has a generation reserved after %d active", projection.ErrStale, subject, gen)
	}
	if err := tx.Commit(ctx); err != nil {
		return s.a.MapError(AreaProjection, "replace: commit", err)
	}
	s.logger.DebugContext(ctx, "baton: projection replaced",
		"subject", subject.String(), "generation", gen, "grants", len(grants), "took", time.Since(started))
	return nil
}

// insertDetails loads a generation's grants, each mask as the signed bigint
// with the same 64 bits: with COPY where the adapter has it, else in one
// statement from arrays.
func (s *ProjectionStore) insertDetails(ctx context.Context, tx Tx, gen int64, grants []projection.Grant) (int64, error) {
	if c, ok := tx.(Copier); ok {
		rows := make([][]any, len(grants))
		for i, g := range grants {
			rows[i] = []any{gen, g.ResourceType, g.ResourceID, int64(g.Mask)}
		}
		return c.CopyFrom(ctx, s.detail, []string{"generation", "resource_type", "resource_id", "mask"}, rows)
	}
	types, ids, masks := make([]string, len(grants)), make([]string, len(grants)), make([]int64, len(grants))
	for i, g := range grants {
		types[i], ids[i], masks[i] = g.ResourceType, g.ResourceID, int64(g.Mask)
	}
	return tx.Exec(ctx, s.insertDetailsSQL, gen, types, ids, masks)
}

// Mask implements projection.Store in one statement.
func (s *ProjectionStore) Mask(ctx context.Context, subject projection.Subject, resourceType, resourceID string) (projection.Mask, bool, error) {
	if err := subject.Validate(); err != nil {
		return 0, false, err
	}
	if err := projection.ValidateResource(resourceType, resourceID); err != nil {
		return 0, false, err
	}
	var mask *int64
	err := s.db.QueryRow(ctx, s.maskSQL, subject.Type, subject.ID, resourceType, resourceID).Scan(&mask)
	switch {
	case errors.Is(err, errNoRows):
		return 0, false, s.noProjection(subject)
	case err != nil:
		return 0, false, s.a.MapError(AreaProjection, "read a mask", err)
	case mask == nil:
		return 0, false, nil
	}
	return projection.Mask(*mask), true, nil
}

// Snapshot implements projection.Store in one statement.
func (s *ProjectionStore) Snapshot(ctx context.Context, subject projection.Subject) (projection.Snapshot, error) {
	if err := subject.Validate(); err != nil {
		return projection.Snapshot{}, err
	}
	rows, err := s.db.Query(ctx, s.snapshotSQL, subject.Type, subject.ID)
	snap := projection.Snapshot{Subject: subject}
	found := false
	err = each(rows, err, func(r Rows) error {
		var (
			gen     int64
			typ, id *string
			mask    *int64
		)
		if err := r.Scan(&gen, &typ, &id, &mask); err != nil {
			return err
		}
		found, snap.Generation = true, projection.Generation(gen)
		if typ != nil {
			snap.Grants = append(snap.Grants, projection.Grant{ResourceType: *typ, ResourceID: *id, Mask: projection.Mask(*mask)})
		}
		return nil
	})
	if err != nil {
		return projection.Snapshot{}, s.a.MapError(AreaProjection, "read a snapshot", err)
	}
	if !found {
		return projection.Snapshot{}, s.noProjection(subject)
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
	rows, err := s.db.Query(ctx, s.generationsSQL, subject.Type, subject.ID)
	infos, err := collect(rows, err, func(r Rows) (projection.GenerationInfo, error) {
		var info projection.GenerationInfo
		var gen int64
		err := r.Scan(&gen, &info.Active, &info.CreatedAt)
		info.Generation = projection.Generation(gen)
		return info, err
	})
	if err != nil {
		return nil, s.a.MapError(AreaProjection, "list generations", err)
	}
	return infos, nil
}

// Sweep implements projection.Store in one statement.
func (s *ProjectionStore) Sweep(ctx context.Context) (int, error) {
	// READ COMMITTED whatever the server's default, like Replace: under
	// REPEATABLE READ, a candidate another sweep deleted after this
	// statement's snapshot is a serialization failure instead of a row to
	// skip.
	tx, err := s.db.Begin(ctx)
	if err != nil {
		return 0, s.a.MapError(AreaProjection, "sweep: begin", err)
	}
	defer rollback(ctx, tx)
	var n int64
	if err := tx.QueryRow(ctx, s.sweepSQL).Scan(&n); err != nil {
		return 0, s.a.MapError(AreaProjection, "sweep", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, s.a.MapError(AreaProjection, "sweep: commit", err)
	}
	if n > 0 {
		s.logger.DebugContext(ctx, "baton: projection sweep", "generations", n)
	}
	return int(n), nil
}

func (s *ProjectionStore) noProjection(subject projection.Subject) error {
	return s.a.errorf("%w: %s has no active generation (never refreshed, or the UNLOGGED tables were emptied by a crash restart)", projection.ErrNoProjection, subject)
}
