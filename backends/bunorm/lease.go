package bunorm

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/pgdialect"
	"github.com/uptrace/bun/driver/pgdriver"
	"github.com/uptrace/bun/schema"

	"github.com/baton-go/baton/backends/internal/pgsql"
	"github.com/baton-go/baton/core/lease"
)

// DefaultLeaseChannel is the NOTIFY channel of releases when
// LeaseStoreOptions.Channel is empty. It is the PostgreSQL adapter's
// default too, so bun and pgx nodes hear each other's releases.
const DefaultLeaseChannel = "baton_role_leases"

// LeaseStoreOptions configure a LeaseStore. The zero value uses the
// defaults.
type LeaseStoreOptions struct {
	// Schema holds baton_role_leases. "" uses the connection's search_path.
	Schema string
	// Channel is the NOTIFY channel on which releases are announced and
	// watched (default DefaultLeaseChannel). Every instance sharing the
	// table, bun or pgx, must use the same channel. It must be printable
	// and hold no double quote or backslash: pgdriver's listener writes it
	// as a Go-quoted string.
	Channel string
	// Logger receives the watcher's diagnostics. nil discards them.
	Logger *slog.Logger
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
	if why := pgsql.ChannelProblem(o.Channel); why != "" {
		return fmt.Errorf("baton/bunorm: LeaseStoreOptions.Channel %q: %s", o.Channel, why)
	}
	return nil
}

// LeaseStore is the lease.Store over baton_role_leases, on any bun.IDB, and
// a lease.ReleaseWatcher through LISTEN/NOTIFY. Create it with
// NewLeaseStore.
//
// Every rule is decided inside single statements, by the database clock,
// exactly as the PostgreSQL adapter decides it (the statements are the
// same), so bun and pgx nodes can share one lease table. On a bun.Tx the
// statements run inside that transaction: a heartbeat there is only seen
// by others once the transaction commits, so give a Manager a *bun.DB.
type LeaseStore struct {
	db   bun.IDB
	opts LeaseStoreOptions
	t    schema.QueryAppender
}

var (
	_ lease.Store          = (*LeaseStore)(nil)
	_ lease.ReleaseWatcher = (*LeaseStore)(nil)
)

// NewLeaseStore returns a LeaseStore over db, or an error naming the first
// invalid option. It asks the database one thing,
// standard_conforming_strings, and refuses a session without it
// (ErrNonStandardStrings); run CreateSchema first.
func NewLeaseStore(ctx context.Context, db bun.IDB, opts LeaseStoreOptions) (*LeaseStore, error) {
	if db == nil {
		return nil, errors.New("baton/bunorm: NewLeaseStore: the database handle is nil")
	}
	if err := opts.validate(); err != nil {
		return nil, err
	}
	if err := checkSession(ctx, db, "NewLeaseStore"); err != nil {
		return nil, err
	}
	return &LeaseStore{db: db, opts: opts, t: tableName(opts.Schema, LeaseTable)}, nil
}

// leaseHeartbeatSQL is the whole heartbeat in one statement: the PostgreSQL
// adapter's, in bun's placeholders. ?0 the table, ?1 holder, ?2 address,
// ?3 lease duration in microseconds, ?4 roles (text[]), ?5 claimed tokens
// (bigint[], 0 = none). See the PostgreSQL adapter for why it is one
// INSERT ... ON CONFLICT pass.
const leaseHeartbeatSQL = `WITH claim AS (
    SELECT c.role, c.token FROM unnest(?4::text[], ?5::bigint[]) AS c (role, token)
), granted AS (
    INSERT INTO ?0 AS l (role, holder, holder_address, token, acquired_at, renewed_at, expires_at)
    SELECT claim.role, ?1, ?2, 1, now(), now(), now() + ?3 * interval '1 microsecond'
    FROM claim
    WHERE NOT EXISTS (
        SELECT 1 FROM ?0 AS cur
        WHERE cur.role = claim.role
          AND cur.expires_at > now()
          AND NOT (cur.holder = ?1 AND cur.token = claim.token))
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
SELECT role, holder, holder_address, token, acquired_at, renewed_at, expires_at, true AS held FROM granted
UNION ALL
SELECT claim.role, l.holder, l.holder_address, l.token, l.acquired_at, l.renewed_at, l.expires_at, false
FROM claim LEFT JOIN ?0 AS l ON l.role = claim.role
WHERE NOT EXISTS (SELECT 1 FROM granted WHERE granted.role = claim.role)`

// leaseReleaseSQL ends a current term and announces it in one statement,
// so the notification goes out exactly when the release commits. ?0 the
// table, ?1 role, ?2 holder, ?3 token, ?4 channel.
const leaseReleaseSQL = `WITH released AS (
    UPDATE ?0
    SET expires_at = now()
    WHERE role = ?1 AND holder = ?2 AND token = ?3 AND expires_at > now()
    RETURNING role
)
SELECT released.role FROM released, pg_notify(?4, released.role) AS announced`

// leaseRow is one row of the heartbeat or read statements; the pointers
// are NULL for a claim whose row another instance inserted after the
// heartbeat's snapshot.
type leaseRow struct {
	Role          string     `bun:"role"`
	Holder        *string    `bun:"holder"`
	HolderAddress *string    `bun:"holder_address"`
	Token         *int64     `bun:"token"`
	AcquiredAt    *time.Time `bun:"acquired_at"`
	RenewedAt     *time.Time `bun:"renewed_at"`
	ExpiresAt     *time.Time `bun:"expires_at"`
	Held          bool       `bun:"held"`
}

func (r leaseRow) record() lease.Record {
	rec := lease.Record{Role: r.Role, Held: r.Held}
	if r.Holder != nil {
		rec.Holder, rec.HolderAddress, rec.Token = *r.Holder, *r.HolderAddress, uint64(*r.Token)
		rec.AcquiredAt, rec.RenewedAt, rec.ExpiresAt = *r.AcquiredAt, *r.RenewedAt, *r.ExpiresAt
	}
	return rec
}

// Heartbeat implements lease.Store in one statement, whatever the number of
// claims. The request is checked first; a bad one sends nothing. A
// LeaseDuration that is not a whole number of microseconds is rounded up.
func (s *LeaseStore) Heartbeat(ctx context.Context, req lease.HeartbeatRequest) ([]lease.Record, error) {
	if err := req.Validate(); err != nil {
		return nil, err
	}
	if len(req.Claims) == 0 {
		return nil, nil
	}
	// Every instance sends its claims in byte order, so statements touching
	// the same rows lock them in the same order rather than deadlock.
	claims := slices.SortedFunc(slices.Values(req.Claims), func(a, b lease.Claim) int { return strings.Compare(a.Role, b.Role) })
	roles := make([]string, len(claims))
	tokens := make([]int64, len(claims))
	for i, c := range claims {
		roles[i] = c.Role
		tokens[i] = claimToken(c.Token)
	}
	micros := (req.LeaseDuration + time.Microsecond - 1) / time.Microsecond
	var rows []leaseRow
	if err := s.db.NewRaw(leaseHeartbeatSQL, s.t, req.Holder, req.Address, int64(micros),
		pgdialect.Array(roles), pgdialect.Array(tokens)).Scan(ctx, &rows); err != nil {
		return nil, mapError(areaLease, "heartbeat", err)
	}
	records := make([]lease.Record, len(rows))
	for i, r := range rows {
		records[i] = r.record()
	}
	return records, nil
}

// claimToken converts a claimed token for the bigint column. Tokens above
// the bigint range were never issued, so, like 0, they match no term.
func claimToken(token uint64) int64 {
	if token > math.MaxInt64 {
		return 0
	}
	return int64(token)
}

// Release implements lease.Store. A release that ends a term notifies the
// channel with the role as payload.
func (s *LeaseStore) Release(ctx context.Context, role, holder string, token uint64) (bool, error) {
	if err := lease.ValidateRole(role); err != nil {
		return false, err
	}
	if holder == "" {
		return false, errors.New("baton/bunorm: lease release: the holder is empty")
	}
	if token == 0 || token > math.MaxInt64 {
		return false, nil // no term has this token
	}
	var released []string
	if err := s.db.NewRaw(leaseReleaseSQL, s.t, role, holder, int64(token), s.opts.Channel).Scan(ctx, &released); err != nil {
		return false, mapError(areaLease, "release", err)
	}
	return len(released) > 0, nil
}

// Read implements lease.Store, through bun's query builder.
func (s *LeaseStore) Read(ctx context.Context, roles []string) ([]lease.Record, error) {
	for _, r := range roles {
		if err := lease.ValidateRole(r); err != nil {
			return nil, err
		}
	}
	if len(roles) == 0 {
		return nil, nil
	}
	var rows []RoleLease
	q := s.db.NewSelect().Model(&rows).Where("role IN (?)", bun.In(roles))
	if s.opts.Schema != "" {
		q = q.ModelTableExpr("? AS ?TableAlias", s.t)
	}
	if err := q.Scan(ctx); err != nil {
		return nil, mapError(areaLease, "read", err)
	}
	records := make([]lease.Record, len(rows))
	for i, r := range rows {
		records[i] = lease.Record{Role: r.Role, Holder: r.Holder, HolderAddress: r.HolderAddress, Token: uint64(r.Token),
			AcquiredAt: r.AcquiredAt, RenewedAt: r.RenewedAt, ExpiresAt: r.ExpiresAt}
	}
	return records, nil
}

// ErrWatchUnsupported is returned by WatchReleases when the store's handle
// cannot LISTEN: it is not a *bun.DB, or its driver is neither bun's
// pgdriver nor pgx's database/sql driver (github.com/jackc/pgx/v5/stdlib).
var ErrWatchUnsupported = errors.New("baton/bunorm: this database handle cannot watch lease releases")

// WatchReleases implements lease.ReleaseWatcher. It needs the store to be
// over a *bun.DB on pgdriver (a pgdriver.Listener, on a connection of its
// own) or on pgx's stdlib driver (one connection of the pool, LISTENing,
// closed afterwards). It returns ctx's error when ctx ends, any other error
// as it happened. Behind PgBouncer in transaction mode it hears nothing:
// give it a direct or session-pooled connection.
func (s *LeaseStore) WatchReleases(ctx context.Context, released func(role string)) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	db, ok := s.db.(*bun.DB)
	if !ok {
		return fmt.Errorf("%w: it is a %T; build the store over the *bun.DB", ErrWatchUnsupported, s.db)
	}
	if _, ok := db.Driver().(pgdriver.Driver); ok {
		return s.watchPgdriver(ctx, db, released)
	}
	return s.watchRaw(ctx, db, released)
}

func (s *LeaseStore) watchPgdriver(ctx context.Context, db *bun.DB, released func(role string)) error {
	ln := pgdriver.NewListener(db)
	// Receive blocks until a notification or the context's deadline;
	// closing the listener is what ends it when ctx is cancelled.
	closed := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		defer close(closed)
		_ = ln.Close()
	})
	defer func() {
		if stop() {
			_ = ln.Close()
		} else {
			<-closed // the closing goroutine ends before this call does
		}
	}()
	if err := ln.Listen(ctx, s.opts.Channel); err != nil {
		if err := endedBy(ctx, err); err != nil {
			return err
		}
		return mapError(areaLease, "watch releases: listen", err)
	}
	s.opts.Logger.DebugContext(ctx, "baton: watching lease releases", "channel", s.opts.Channel)
	for {
		channel, payload, err := ln.Receive(ctx)
		if err != nil {
			if err := endedBy(ctx, err); err != nil {
				return err
			}
			s.opts.Logger.DebugContext(ctx, "baton: watching lease releases failed", "channel", s.opts.Channel, "err", err)
			return mapError(areaLease, "watch releases", err)
		}
		if channel == s.opts.Channel {
			released(payload)
		}
	}
}

// endedBy returns ctx's error when err came from ctx ending, else nil.
// pgdriver turns a context deadline into the connection's read deadline,
// so the read can time out a moment before ctx reports the deadline: a
// timeout at the deadline waits for ctx to catch up.
func endedBy(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	var netErr net.Error
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) < 100*time.Millisecond && errors.As(err, &netErr) && netErr.Timeout() {
		<-ctx.Done()
		return ctx.Err()
	}
	return nil
}

// watchRaw listens on one connection of db's pool through the driver's own
// connection, for pgx's stdlib driver. The connection is discarded
// afterwards rather than returned to the pool: it may still be listening.
func (s *LeaseStore) watchRaw(ctx context.Context, db *bun.DB, released func(role string)) error {
	conn, err := db.DB.Conn(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return mapError(areaLease, "watch releases: get a connection", err)
	}
	defer conn.Close()
	var watchErr error
	rawErr := conn.Raw(func(dc any) error {
		pc, ok := dc.(interface{ Conn() *pgx.Conn })
		if !ok {
			watchErr = fmt.Errorf("%w: its driver connection is a %T", ErrWatchUnsupported, dc)
			return nil
		}
		if _, err := pc.Conn().Exec(ctx, "LISTEN "+pgx.Identifier{s.opts.Channel}.Sanitize()); err != nil {
			watchErr = err
			return driver.ErrBadConn
		}
		s.opts.Logger.DebugContext(ctx, "baton: watching lease releases", "channel", s.opts.Channel)
		for {
			n, err := pc.Conn().WaitForNotification(ctx)
			if err != nil {
				watchErr = err
				return driver.ErrBadConn // discard: it is still listening
			}
			if n.Channel == s.opts.Channel {
				released(n.Payload)
			}
		}
	})
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if errors.Is(watchErr, ErrWatchUnsupported) {
		return watchErr
	}
	if watchErr == nil {
		watchErr = rawErr
	}
	if watchErr == nil || errors.Is(watchErr, driver.ErrBadConn) || errors.Is(watchErr, sql.ErrConnDone) {
		watchErr = errors.New("the connection was lost")
	}
	return mapError(areaLease, "watch releases", watchErr)
}
