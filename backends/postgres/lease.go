package postgres

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/baton-go/baton/core/lease"
	"github.com/baton-go/baton/internal/pgrules"
)

// LeaseTable is the table holding one row per role lease, created by the
// 0002_role_leases migration.
const LeaseTable = "baton_role_leases"

// DefaultLeaseChannel is the NOTIFY channel of releases when
// LeaseStoreOptions.Channel is empty.
const DefaultLeaseChannel = "baton_role_leases"

// LeaseStoreOptions configure a LeaseStore. The zero value uses the
// defaults.
type LeaseStoreOptions struct {
	// Schema holds baton_role_leases. "" uses the connection's search_path;
	// otherwise every statement names the table in this schema.
	Schema string
	// Logger receives the watcher's diagnostics. nil discards them.
	Logger *slog.Logger
	// Channel is the NOTIFY channel on which releases are announced and
	// watched (default DefaultLeaseChannel). Every instance sharing the
	// table must use the same channel. Channels are per database, so lease
	// tables in different schemas of one database should use different
	// channels; otherwise each side's watchers also hear the other's
	// releases, which costs a heartbeat each but is otherwise harmless.
	Channel string
}

func (o *LeaseStoreOptions) validate() error {
	if o.Channel == "" {
		o.Channel = DefaultLeaseChannel
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Schema != "" {
		if err := validateSchemaName("LeaseStoreOptions.Schema", o.Schema); err != nil {
			return err
		}
	}
	if why := pgrules.ChannelProblem(o.Channel); why != "" {
		return fmt.Errorf("baton/postgres: LeaseStoreOptions.Channel %q: %s", o.Channel, why)
	}
	return nil
}

// LeaseStore is the lease.Store over the baton_role_leases table, and a
// lease.ReleaseWatcher through LISTEN/NOTIFY. Create it with NewLeaseStore.
//
// Every rule is decided inside single SQL statements, by the database
// clock (now(), the statement's transaction start): the clocks of the
// competing instances never need to agree, and concurrent heartbeats of
// several instances serialize on the role's row.
//
// Heartbeat, Release and Read work through any pooler; WatchReleases needs
// a session of its own for LISTEN, so behind PgBouncer in transaction mode
// it hears nothing: give it a direct or session-pooled pool.
type LeaseStore struct {
	pool *pgxpool.Pool
	opts LeaseStoreOptions

	heartbeatSQL string
	releaseSQL   string
	readSQL      string
	listenSQL    string
}

var (
	_ lease.Store          = (*LeaseStore)(nil)
	_ lease.ReleaseWatcher = (*LeaseStore)(nil)
)

// NewLeaseStore returns a LeaseStore over pool, or an error naming the first
// invalid option. It sends nothing to the database; run Migrate (or the
// migrations) first.
func NewLeaseStore(pool *pgxpool.Pool, opts LeaseStoreOptions) (*LeaseStore, error) {
	if pool == nil {
		return nil, errors.New("baton/postgres: NewLeaseStore: the pool is nil")
	}
	if err := opts.validate(); err != nil {
		return nil, err
	}
	table := pgx.Identifier{LeaseTable}
	if opts.Schema != "" {
		table = pgx.Identifier{opts.Schema, LeaseTable}
	}
	t := table.Sanitize()
	return &LeaseStore{
		pool:         pool,
		opts:         opts,
		heartbeatSQL: leaseHeartbeatSQL(t),
		releaseSQL:   leaseReleaseSQL(t),
		readSQL:      leaseReadSQL(t),
		listenSQL:    "LISTEN " + pgx.Identifier{opts.Channel}.Sanitize(),
	}, nil
}

// leaseColumns are the columns of a Record, in scan order.
const leaseColumns = "role, holder, holder_address, token, acquired_at, renewed_at, expires_at"

// leaseHeartbeatSQL is the whole heartbeat, in one statement over the quoted
// table t. Parameters: $1 holder, $2 address, $3 lease duration (interval),
// $4 roles (text[]), $5 claimed tokens (bigint[], 0 = none).
//
// Renewals and takeovers are one INSERT ... ON CONFLICT DO UPDATE, which
// visits the claims once, in the order given: a role with no row is
// inserted with token 1; a conflicting row that has expired is taken over
// with the next token; a conflicting row that is the requester's live term
// (same holder and claimed token) is renewed; any other row is left alone.
// ON CONFLICT judges the latest committed version of the row, under its
// row lock, so of several instances taking one role at once exactly one
// succeeds, and a renewal never extends a term that has just changed hands.
// Doing both in one pass matters: with a renewal step before a takeover
// step, two instances could each lock a row in the first step and wait for
// the other's in the second, and deadlock.
//
// The NOT EXISTS filter spares the attempt (and the row lock) for claims
// whose row is, in the statement's snapshot, somebody else's live term. The
// last branch reports the rows of the claims not granted, as that snapshot
// shows them. Every branch looks rows up by the primary key, one probe per
// claim.
func leaseHeartbeatSQL(t string) string {
	return `WITH claim AS (
    SELECT c.role, c.token FROM unnest($4::text[], $5::bigint[]) AS c (role, token)
), granted AS (
    INSERT INTO ` + t + ` AS l (` + leaseColumns + `)
    SELECT claim.role, $1, $2, 1, now(), now(), now() + $3::interval
    FROM claim
    WHERE NOT EXISTS (
        SELECT 1 FROM ` + t + ` AS cur
        WHERE cur.role = claim.role
          AND cur.expires_at > now()
          AND NOT (cur.holder = $1 AND cur.token = claim.token))
    ON CONFLICT (role) DO UPDATE
    SET holder = excluded.holder,
        holder_address = excluded.holder_address,
        token = CASE WHEN l.expires_at <= now() THEN l.token + 1 ELSE l.token END,
        acquired_at = CASE WHEN l.expires_at <= now() THEN now() ELSE l.acquired_at END,
        renewed_at = now(),
        expires_at = excluded.expires_at
    WHERE l.expires_at <= now()
       OR (l.holder = excluded.holder
           AND l.token = (SELECT own.token FROM claim AS own WHERE own.role = excluded.role)
           AND l.token <> 0)
    RETURNING l.role, l.holder, l.holder_address, l.token, l.acquired_at, l.renewed_at, l.expires_at
)
SELECT role, holder, holder_address, token, acquired_at, renewed_at, expires_at, true FROM granted
UNION ALL
SELECT claim.role, l.holder, l.holder_address, l.token, l.acquired_at, l.renewed_at, l.expires_at, false
FROM claim LEFT JOIN ` + t + ` AS l ON l.role = claim.role
WHERE NOT EXISTS (SELECT 1 FROM granted WHERE granted.role = claim.role)`
}

// leaseReleaseSQL ends a current term and announces it, in one statement,
// so in one transaction: the notification goes out exactly when the release
// commits. The row stays with its token, so the next term's is larger.
// Parameters: $1 role, $2 holder, $3 token, $4 channel.
func leaseReleaseSQL(t string) string {
	return `WITH released AS (
    UPDATE ` + t + `
    SET expires_at = now()
    WHERE role = $1 AND holder = $2 AND token = $3 AND expires_at > now()
    RETURNING role
)
SELECT released.role FROM released, pg_notify($4, released.role) AS announced`
}

// leaseReadSQL reads the rows of the roles in $1 (text[]).
func leaseReadSQL(t string) string {
	return `SELECT ` + leaseColumns + ` FROM ` + t + ` WHERE role = ANY ($1::text[])`
}

// Heartbeat implements lease.Store in one statement, whatever the number of
// claims. The request is checked first; a bad one sends nothing.
//
// The database keeps times in microseconds: a LeaseDuration that is not a
// whole number of microseconds is rounded up to the next one.
func (s *LeaseStore) Heartbeat(ctx context.Context, req lease.HeartbeatRequest) ([]lease.Record, error) {
	if err := req.Validate(); err != nil {
		return nil, err
	}
	if len(req.Claims) == 0 {
		return nil, nil
	}
	// Every instance sends its claims in the same (byte) order, so that
	// statements touching the same rows lock them in the same order rather
	// than deadlock.
	claims := slices.SortedFunc(slices.Values(req.Claims), func(a, b lease.Claim) int { return strings.Compare(a.Role, b.Role) })
	roles := make([]string, len(claims))
	tokens := make([]int64, len(claims))
	for i, c := range claims {
		roles[i] = c.Role
		tokens[i] = leaseClaimToken(c.Token)
	}
	rows, err := s.pool.Query(ctx, s.heartbeatSQL, req.Holder, req.Address, leaseInterval(req.LeaseDuration), roles, tokens)
	if err != nil {
		return nil, leaseError("heartbeat", err)
	}
	records, err := pgx.CollectRows(rows, scanLeaseHeartbeatRow)
	if err != nil {
		return nil, leaseError("heartbeat", err)
	}
	return records, nil
}

// leaseClaimToken converts a claimed token for the bigint column. Tokens
// above the bigint range were never issued, so, like 0, they match no term.
func leaseClaimToken(token uint64) int64 {
	if token > math.MaxInt64 {
		return 0
	}
	return int64(token)
}

// leaseInterval rounds a positive duration up to whole microseconds, the
// resolution of PostgreSQL's interval, so no lease is ever shortened to 0.
func leaseInterval(d time.Duration) time.Duration {
	if r := d % time.Microsecond; r != 0 {
		d += time.Microsecond - r
	}
	return d
}

// scanLeaseHeartbeatRow scans one row of the heartbeat statement. The row's
// columns are NULL when a claim has no row at all, which happens only when
// another instance inserted the role concurrently, after this statement's
// snapshot; the claim is then reported as refused, holder unknown.
func scanLeaseHeartbeatRow(row pgx.CollectableRow) (lease.Record, error) {
	var (
		r                    lease.Record
		holder, address      *string
		token                *int64
		acquired, renewed, e *time.Time
	)
	if err := row.Scan(&r.Role, &holder, &address, &token, &acquired, &renewed, &e, &r.Held); err != nil {
		return lease.Record{}, err
	}
	if holder != nil {
		r.Holder, r.HolderAddress, r.Token = *holder, *address, uint64(*token)
		r.AcquiredAt, r.RenewedAt, r.ExpiresAt = *acquired, *renewed, *e
	}
	return r, nil
}

// Release implements lease.Store. A release that ends a term notifies the
// channel with the role as payload.
func (s *LeaseStore) Release(ctx context.Context, role, holder string, token uint64) (bool, error) {
	if err := lease.ValidateRole(role); err != nil {
		return false, err
	}
	if holder == "" {
		return false, errors.New("baton/postgres: release: the holder is empty")
	}
	if token == 0 || token > math.MaxInt64 {
		return false, nil // no term has this token
	}
	rows, err := s.pool.Query(ctx, s.releaseSQL, role, holder, int64(token), s.opts.Channel)
	if err != nil {
		return false, leaseError("release", err)
	}
	released, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return false, leaseError("release", err)
	}
	return len(released) > 0, nil
}

// Read implements lease.Store.
func (s *LeaseStore) Read(ctx context.Context, roles []string) ([]lease.Record, error) {
	for _, r := range roles {
		if err := lease.ValidateRole(r); err != nil {
			return nil, err
		}
	}
	if len(roles) == 0 {
		return nil, nil
	}
	rows, err := s.pool.Query(ctx, s.readSQL, roles)
	if err != nil {
		return nil, leaseError("read", err)
	}
	records, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (lease.Record, error) {
		var r lease.Record
		var token int64
		err := row.Scan(&r.Role, &r.Holder, &r.HolderAddress, &token, &r.AcquiredAt, &r.RenewedAt, &r.ExpiresAt)
		r.Token = uint64(token)
		return r, err
	})
	if err != nil {
		return nil, leaseError("read", err)
	}
	return records, nil
}

// WatchReleases implements lease.ReleaseWatcher. It holds one connection of
// the pool, listening on the channel, until ctx ends or the connection
// fails; the connection is then closed rather than returned to the pool,
// since it may still be listening or be cut off mid-read. It returns ctx's
// error when ctx ends, any other error as it happened.
func (s *LeaseStore) WatchReleases(ctx context.Context, released func(role string)) error {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return leaseError("watch releases: get a connection", err)
	}
	defer closeLeaseConn(conn)
	if _, err := conn.Exec(ctx, s.listenSQL); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return leaseError("watch releases: listen", err)
	}
	s.opts.Logger.DebugContext(ctx, "baton: watching lease releases", "channel", s.opts.Channel)
	for {
		n, err := conn.Conn().WaitForNotification(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			s.opts.Logger.DebugContext(ctx, "baton: watching lease releases failed", "channel", s.opts.Channel, "err", err)
			return leaseError("watch releases", err)
		}
		released(n.Payload)
	}
}

// closeLeaseConn takes the connection out of its pool and closes it.
func closeLeaseConn(conn *pgxpool.Conn) {
	c := conn.Hijack()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = c.Close(ctx)
}

// leaseError is the one place where the lease store's driver errors are
// mapped: a missing table or column wraps ErrSchemaMismatch, a role the
// database refuses wraps lease.ErrInvalidRole, and context errors stay
// recognizable with errors.Is.
func leaseError(op string, err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "42P01", "42703": // undefined_table, undefined_column
			return fmt.Errorf("baton/postgres: lease %s: %w: %s (run postgres.Migrate, or check LeaseStoreOptions.Schema and the search_path): %w", op, ErrSchemaMismatch, LeaseTable, err)
		case "23514", "22021": // check_violation, character_not_in_repertoire
			return fmt.Errorf("baton/postgres: lease %s: %w: the database refused it: %w", op, lease.ErrInvalidRole, err)
		}
	}
	return fmt.Errorf("baton/postgres: lease %s: %w", op, err)
}
