package bunorm

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"time"

	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/pgdialect"
	"github.com/uptrace/bun/schema"

	"github.com/baton-go/baton/backends/internal/pgsql"
	"github.com/baton-go/baton/core/projection"
)

// ProjectionStoreOptions configure a ProjectionStore. The zero value uses
// the defaults.
type ProjectionStoreOptions struct {
	// Schema holds the projection tables. "" uses the connection's
	// search_path.
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
// baton_projection_detail (both UNLOGGED), on a bun.IDB. Create it with
// NewProjectionStore.
//
// Reserve is one nextval of the generation sequence. Replace runs one READ
// COMMITTED transaction (bun's RunInTx), whatever the server's
// default_transaction_isolation, as the PostgreSQL adapter does: it inserts
// the generation's header (inactive) under the reserved number, inserts the
// detail rows in one statement from arrays, then, holding a
// transaction-scoped advisory lock keyed by the subject, the same key the
// PostgreSQL adapter takes, demotes the active generation if it is older and
// promotes the new one if no newer one is active; a newer one makes it roll
// back with projection.ErrStale. Reads are one statement each; Sweep is one
// statement, READ COMMITTED too, that locks nothing it has to wait for. bun and pgx nodes can
// share the tables and the sequence.
type ProjectionStore struct {
	db   bun.IDB
	opts ProjectionStoreOptions

	h, d       schema.QueryAppender
	seq        schema.QueryAppender // the generation sequence
	seqName    string               // the same, quoted, for nextval's regclass
	lockPrefix string               // the header table as the PostgreSQL adapter quotes it
}

var _ projection.Store = (*ProjectionStore)(nil)

// NewProjectionStore returns a ProjectionStore over db, or an error naming
// the first invalid option. It asks the database one thing,
// standard_conforming_strings, and refuses a session without it
// (ErrNonStandardStrings); run CreateSchema first.
func NewProjectionStore(ctx context.Context, db bun.IDB, opts ProjectionStoreOptions) (*ProjectionStore, error) {
	if db == nil {
		return nil, errors.New("baton/bunorm: NewProjectionStore: the database handle is nil")
	}
	if err := opts.validate(); err != nil {
		return nil, err
	}
	if err := checkSession(ctx, db, "NewProjectionStore"); err != nil {
		return nil, err
	}
	prefix, seqName := quoteName(ProjectionHeaderTable), quoteName(generationSequence)
	if opts.Schema != "" {
		prefix = quoteName(opts.Schema) + "." + prefix
		seqName = quoteName(opts.Schema) + "." + seqName
	}
	return &ProjectionStore{
		db: db, opts: opts,
		h:          tableName(opts.Schema, ProjectionHeaderTable),
		d:          tableName(opts.Schema, ProjectionDetailTable),
		seq:        tableName(opts.Schema, generationSequence),
		seqName:    seqName,
		lockPrefix: prefix,
	}, nil
}

// lockKey orders the flips of one subject: the PostgreSQL adapter's key
// (pgsql.ProjectionLockKey), so flips from bun and pgx nodes order
// together.
func (s *ProjectionStore) lockKey(subject projection.Subject) int64 {
	return pgsql.ProjectionLockKey(s.lockPrefix, subject.Type, subject.ID)
}

// Reserve implements projection.Store: one nextval of the generation
// sequence.
func (s *ProjectionStore) Reserve(ctx context.Context) (projection.Generation, error) {
	var gen int64
	if err := s.db.NewRaw(`SELECT nextval(?::regclass)`, s.seqName).Scan(ctx, &gen); err != nil {
		return 0, mapError(areaProjection, "reserve a generation", err)
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
		return fmt.Errorf("baton/bunorm: projection replace: %w: %d is not a generation the sequence hands out; use one from Reserve", projection.ErrInvalidGeneration, generation)
	}
	gen := int64(generation)
	started := time.Now()
	// READ COMMITTED whatever the server's default: the flip's statements
	// must each see the flips committed before the subject's lock was
	// granted, which a transaction-wide snapshot would hide.
	err := s.db.RunInTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted}, func(ctx context.Context, tx bun.Tx) error {
		// Only a number the sequence has handed out: one from the future
		// would make every later refresh of the subject stale.
		res, err := tx.NewRaw(`INSERT INTO ?0 (generation, subject_type, subject_id)
SELECT ?2::bigint, ?3::text, ?4::text FROM ?1 WHERE is_called AND ?2::bigint <= last_value`,
			s.h, s.seq, gen, subject.Type, subject.ID).Exec(ctx)
		switch {
		case sqlState(err) == "23505": // unique_violation: the primary key
			return fmt.Errorf("baton/bunorm: projection replace: %w: generation %d is already written", projection.ErrInvalidGeneration, gen)
		case err != nil:
			return mapError(areaProjection, "replace: insert the header", err)
		}
		if n, err := res.RowsAffected(); err != nil || n != 1 {
			return fmt.Errorf("baton/bunorm: projection replace: %w: generation %d was never reserved (%s has not handed it out)",
				projection.ErrInvalidGeneration, gen, generationSequence)
		}
		if len(grants) > 0 {
			types, ids, masks := make([]string, len(grants)), make([]string, len(grants)), make([]int64, len(grants))
			for i, g := range grants {
				types[i], ids[i], masks[i] = g.ResourceType, g.ResourceID, int64(g.Mask) // the mask's bit pattern
			}
			res, err := tx.NewRaw(`INSERT INTO ?0 (generation, resource_type, resource_id, mask)
SELECT ?1, g.resource_type, g.resource_id, g.mask FROM unnest(?2::text[], ?3::text[], ?4::bigint[]) AS g (resource_type, resource_id, mask)`,
				s.d, gen, pgdialect.Array(types), pgdialect.Array(ids), pgdialect.Array(masks)).Exec(ctx)
			if err != nil {
				return mapError(areaProjection, "replace: insert the grants", err)
			}
			if n, err := res.RowsAffected(); err != nil || n != int64(len(grants)) {
				return fmt.Errorf("baton/bunorm: projection replace: inserted %d of %d grants", n, len(grants))
			}
		}
		// The flip: the subject's lock, then demote an older active
		// generation and promote this one unless a newer one is active,
		// each a statement of its own so each sees what committed before it.
		if _, err := tx.NewRaw(`SELECT pg_advisory_xact_lock(?)`, s.lockKey(subject)).Exec(ctx); err != nil {
			return mapError(areaProjection, "replace: lock the subject", err)
		}
		if _, err := tx.NewUpdate().Model((*ProjectionHeader)(nil)).ModelTableExpr("? AS ?TableAlias", s.h).
			Set("active = false").
			Where("subject_type = ? AND subject_id = ? AND active AND generation < ?", subject.Type, subject.ID, gen).Exec(ctx); err != nil {
			return mapError(areaProjection, "replace: demote", err)
		}
		res, err = tx.NewUpdate().Model((*ProjectionHeader)(nil)).ModelTableExpr("? AS ?TableAlias", s.h).
			Set("active = true").Where("generation = ?", gen).
			Where("NOT EXISTS (SELECT FROM ? AS a WHERE a.subject_type = ? AND a.subject_id = ? AND a.active)", s.h, subject.Type, subject.ID).
			Exec(ctx)
		if err != nil {
			return mapError(areaProjection, "replace: promote", err)
		}
		if n, err := res.RowsAffected(); err != nil || n != 1 {
			return fmt.Errorf("baton/bunorm: projection replace: %w: %s has a generation reserved after %d active", projection.ErrStale, subject, gen)
		}
		return nil
	})
	if err != nil {
		return err
	}
	s.opts.Logger.DebugContext(ctx, "baton: projection replaced",
		"subject", subject.String(), "generation", gen, "grants", len(grants), "took", time.Since(started))
	return nil
}

// Mask implements projection.Store in one statement: no row means no
// active generation, a row with a NULL mask no grant for the resource.
func (s *ProjectionStore) Mask(ctx context.Context, subject projection.Subject, resourceType, resourceID string) (projection.Mask, bool, error) {
	if err := subject.Validate(); err != nil {
		return 0, false, err
	}
	if err := projection.ValidateResource(resourceType, resourceID); err != nil {
		return 0, false, err
	}
	var masks []struct {
		Mask *int64 `bun:"mask"`
	}
	err := s.db.NewRaw(`SELECT d.mask
FROM ?0 AS h
LEFT JOIN ?1 AS d
       ON d.generation = h.generation AND d.resource_type = ?4 AND d.resource_id = ?5
WHERE h.subject_type = ?2 AND h.subject_id = ?3 AND h.active`, s.h, s.d, subject.Type, subject.ID, resourceType, resourceID).Scan(ctx, &masks)
	switch {
	case err != nil:
		return 0, false, mapError(areaProjection, "read a mask", err)
	case len(masks) == 0:
		return 0, false, noProjection(subject)
	case masks[0].Mask == nil:
		return 0, false, nil
	}
	return projection.Mask(*masks[0].Mask), true, nil
}

// snapshotRow is one row of a snapshot: NULL resource columns for an empty
// generation.
type snapshotRow struct {
	Generation   int64          `bun:"generation"`
	ResourceType sql.NullString `bun:"resource_type"`
	ResourceID   sql.NullString `bun:"resource_id"`
	Mask         sql.NullInt64  `bun:"mask"`
}

// Snapshot implements projection.Store in one statement, in byte order.
func (s *ProjectionStore) Snapshot(ctx context.Context, subject projection.Subject) (projection.Snapshot, error) {
	if err := subject.Validate(); err != nil {
		return projection.Snapshot{}, err
	}
	var rows []snapshotRow
	if err := s.db.NewRaw(`SELECT h.generation, d.resource_type, d.resource_id, d.mask
FROM ?0 AS h
LEFT JOIN ?1 AS d ON d.generation = h.generation
WHERE h.subject_type = ?2 AND h.subject_id = ?3 AND h.active
ORDER BY d.resource_type, d.resource_id`, s.h, s.d, subject.Type, subject.ID).Scan(ctx, &rows); err != nil {
		return projection.Snapshot{}, mapError(areaProjection, "read a snapshot", err)
	}
	if len(rows) == 0 {
		return projection.Snapshot{}, noProjection(subject)
	}
	snap := projection.Snapshot{Subject: subject, Generation: projection.Generation(rows[0].Generation)}
	for _, r := range rows {
		if r.ResourceType.Valid {
			snap.Grants = append(snap.Grants, projection.Grant{ResourceType: r.ResourceType.String, ResourceID: r.ResourceID.String,
				Mask: projection.Mask(r.Mask.Int64)})
		}
	}
	return snap, nil
}

// Generations implements projection.Store, through bun's query builder.
func (s *ProjectionStore) Generations(ctx context.Context, subject projection.Subject) ([]projection.GenerationInfo, error) {
	if err := subject.Validate(); err != nil {
		return nil, err
	}
	var rows []ProjectionHeader
	if err := s.db.NewSelect().Model(&rows).ModelTableExpr("? AS ?TableAlias", s.h).
		Where("subject_type = ? AND subject_id = ?", subject.Type, subject.ID).
		Order("generation").Scan(ctx); err != nil {
		return nil, mapError(areaProjection, "list generations", err)
	}
	infos := make([]projection.GenerationInfo, len(rows))
	for i, r := range rows {
		infos[i] = projection.GenerationInfo{Generation: projection.Generation(r.Generation), Active: r.Active, CreatedAt: r.CreatedAt}
	}
	return infos, nil
}

// Sweep implements projection.Store in one statement: it deletes the
// superseded headers it can lock without waiting, and their details.
func (s *ProjectionStore) Sweep(ctx context.Context) (int, error) {
	var n int64
	// READ COMMITTED whatever the server's default, like Replace: under
	// REPEATABLE READ, a candidate another sweep deleted after this
	// statement's snapshot is a serialization failure instead of a row to
	// skip.
	err := s.db.RunInTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted}, func(ctx context.Context, tx bun.Tx) error {
		return tx.NewRaw(`WITH gone AS (
    DELETE FROM ?0
    WHERE generation = ANY (ARRAY(
        SELECT generation FROM ?0
        WHERE NOT active
        ORDER BY generation
        FOR UPDATE SKIP LOCKED))
    RETURNING generation
), details AS (
    DELETE FROM ?1 WHERE generation = ANY (ARRAY(SELECT generation FROM gone))
)
SELECT count(*) FROM gone`, s.h, s.d).Scan(ctx, &n)
	})
	if err != nil {
		return 0, mapError(areaProjection, "sweep", err)
	}
	if n > 0 {
		s.opts.Logger.DebugContext(ctx, "baton: projection sweep", "generations", n)
	}
	return int(n), nil
}

func noProjection(subject projection.Subject) error {
	return fmt.Errorf("baton/bunorm: %w: %s has no active generation (never refreshed, or the UNLOGGED tables were emptied by a crash restart)", projection.ErrNoProjection, subject)
}
