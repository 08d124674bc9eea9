package pgsql

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/baton-go/baton/core/lease"
)

// DefaultLeaseChannel is the NOTIFY channel of releases when none is
// configured, for both adapters, so their nodes hear each other.
const DefaultLeaseChannel = "baton_role_leases"

// LeaseStoreOptions configure a LeaseStore, of either adapter. The zero
// value uses the defaults.
type LeaseStoreOptions struct {
	// Schema holds baton_role_leases. "" uses the connection's search_path;
	// otherwise every statement names the table in this schema.
	Schema string
	// Channel is the NOTIFY channel on which releases are announced and
	// watched (default DefaultLeaseChannel). Every instance sharing the
	// table, of either adapter, must use the same channel. Channels are per
	// database, so lease tables in different schemas of one database should
	// use different channels; otherwise each side's watchers also hear the
	// other's releases, which costs a heartbeat each but is otherwise
	// harmless.
	Channel string
	// Logger receives the watcher's diagnostics. nil discards them.
	Logger *slog.Logger
}

// withDefaults returns a copy of c with its zero fields set to the
// defaults.
func (c LeaseStoreOptions) withDefaults() LeaseStoreOptions {
	if c.Channel == "" {
		c.Channel = DefaultLeaseChannel
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// validate checks options that have their defaults.
func (c LeaseStoreOptions) validate(a Adapter) error {
	if c.Schema != "" {
		if err := ValidateSchemaName("LeaseStoreOptions.Schema", c.Schema); err != nil {
			return err
		}
	}
	if why := ChannelProblem(c.Channel); why != "" {
		return a.invalid(lease.ErrInvalidConfig, "LeaseStoreOptions.Channel", "%q: %s", c.Channel, why)
	}
	return nil
}

// LeaseStore is the lease.Store over baton_role_leases, and the listening
// half of a lease.ReleaseWatcher; the adapters give it a connection to
// listen on.
//
// Every rule is decided inside single SQL statements, by the database
// clock (now(), the statement's transaction start): the clocks of the
// competing instances never need to agree, and concurrent heartbeats of
// several instances serialize on the role's row.
type LeaseStore struct {
	db      DB
	a       Adapter
	channel string
	logger  *slog.Logger

	heartbeatSQL, releaseSQL, readSQL, listSQL, listenSQL string
}

// NewLeaseStore returns a LeaseStore over db, or an error naming the first
// invalid option. It sends nothing.
func NewLeaseStore(db DB, a Adapter, c LeaseStoreOptions) (*LeaseStore, error) {
	c = c.withDefaults()
	if err := c.validate(a); err != nil {
		return nil, err
	}
	t := qualified(c.Schema, LeaseTable)
	return &LeaseStore{
		db: db, a: a, channel: c.Channel, logger: c.Logger,
		heartbeatSQL: leaseHeartbeatSQL(t),
		releaseSQL:   leaseReleaseSQL(t),
		readSQL:      `SELECT ` + leaseColumns + ` FROM ` + t + ` WHERE role = ANY ($1::text[])`,
		// Liveness and the time left by the database clock, as the rules
		// judge expiry, never by the reader's.
		listSQL:   `SELECT ` + leaseColumns + `, expires_at > now(), extract(epoch FROM expires_at - now())::float8 FROM ` + t,
		listenSQL: "LISTEN " + quote(c.Channel),
	}, nil
}

// Channel is the NOTIFY channel of releases.
func (s *LeaseStore) Channel() string { return s.channel }

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

// HeartbeatSQL is the heartbeat statement, for plan tests.
func (s *LeaseStore) HeartbeatSQL() string { return s.heartbeatSQL }

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
	rows, err := s.db.Query(ctx, s.heartbeatSQL, req.Holder, req.Address, leaseInterval(req.LeaseDuration), roles, tokens)
	records, err := collect(rows, err, scanHeartbeatRow)
	if err != nil {
		return nil, s.a.MapError(AreaLease, "heartbeat", err)
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

// scanHeartbeatRow scans one row of the heartbeat statement. The row's
// columns are NULL when a claim has no row at all, which happens only when
// another instance inserted the role concurrently, after this statement's
// snapshot; the claim is then reported as refused, holder unknown.
func scanHeartbeatRow(row Rows) (lease.Record, error) {
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
		return false, s.a.errorf("lease release: the holder is empty")
	}
	if token == 0 || token > math.MaxInt64 {
		return false, nil // no term has this token
	}
	rows, err := s.db.Query(ctx, s.releaseSQL, role, holder, int64(token), s.channel)
	released, err := collect(rows, err, func(r Rows) (string, error) {
		var role string
		return role, r.Scan(&role)
	})
	if err != nil {
		return false, s.a.MapError(AreaLease, "release", err)
	}
	return len(released) > 0, nil
}

// Read implements lease.Store in one statement.
func (s *LeaseStore) Read(ctx context.Context, roles []string) ([]lease.Record, error) {
	for _, r := range roles {
		if err := lease.ValidateRole(r); err != nil {
			return nil, err
		}
	}
	if len(roles) == 0 {
		return nil, nil
	}
	rows, err := s.db.Query(ctx, s.readSQL, roles)
	records, err := collect(rows, err, func(row Rows) (lease.Record, error) {
		var r lease.Record
		var token int64
		err := row.Scan(&r.Role, &r.Holder, &r.HolderAddress, &token, &r.AcquiredAt, &r.RenewedAt, &r.ExpiresAt)
		r.Token = uint64(token)
		return r, err
	})
	if err != nil {
		return nil, s.a.MapError(AreaLease, "read", err)
	}
	return records, nil
}

// List implements lease.Lister in one statement: every row of the table,
// a full scan, for operators.
func (s *LeaseStore) List(ctx context.Context) ([]lease.Listed, error) {
	rows, err := s.db.Query(ctx, s.listSQL)
	listed, err := collect(rows, err, func(row Rows) (lease.Listed, error) {
		var (
			l       lease.Listed
			token   int64
			seconds float64
		)
		err := row.Scan(&l.Role, &l.Holder, &l.HolderAddress, &token, &l.AcquiredAt, &l.RenewedAt, &l.ExpiresAt, &l.Live, &seconds)
		l.Token = uint64(token)
		l.Remaining = time.Duration(math.Round(seconds*1e6)) * time.Microsecond
		return l, err
	})
	if err != nil {
		return nil, s.a.MapError(AreaLease, "list", err)
	}
	return listed, nil
}

// WatchSession is the adapters' WatchReleases: it listens on a session of
// open's and calls released with every role announced on the channel,
// until ctx ends (it returns ctx's error) or the connection fails. The
// session then ends: its connection may still be listening, or be cut off
// mid-read.
func (s *LeaseStore) WatchSession(ctx context.Context, open Session, released func(role string)) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	conn, release, err := open(ctx)
	if err != nil {
		return s.watchError(ctx, "get a connection", err)
	}
	defer release()
	return s.watch(ctx, conn, released)
}

// watch listens on conn and calls released with every role announced on
// the channel, until ctx ends (ctx's error) or the connection fails.
func (s *LeaseStore) watch(ctx context.Context, conn *pgx.Conn, released func(role string)) error {
	if _, err := conn.Exec(ctx, s.listenSQL); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return s.a.MapError(AreaLease, "watch releases: listen", err)
	}
	s.logger.DebugContext(ctx, "baton: watching lease releases", "channel", s.channel)
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			s.logger.DebugContext(ctx, "baton: watching lease releases failed", "channel", s.channel, "err", err)
			return s.a.MapError(AreaLease, "watch releases", err)
		}
		if n.Channel == s.channel {
			released(n.Payload)
		}
	}
}

// watchError is the error of a watch that could not start: ctx's error
// when ctx ended, else err mapped.
func (s *LeaseStore) watchError(ctx context.Context, op string, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return s.a.MapError(AreaLease, "watch releases: "+op, err)
}
