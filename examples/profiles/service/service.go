package service

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/trace"

	"github.com/baton-go/baton/backends/pgxstore"
	"github.com/baton-go/baton/core/lease"
	"github.com/baton-go/baton/core/outbox"
	"github.com/baton-go/baton/graph"
	"github.com/baton-go/baton/graph/graphtest"
	"github.com/baton-go/baton/otelbaton"
)

// entityType is how the graph engine knows a profile.
const entityType = "profile"

// maxBody bounds a request body.
const maxBody = 64 << 10

// service holds the HTTP handlers and the maintenance loop.
type service struct {
	pool       *pgxpool.Pool
	outbox     *pgxstore.OutboxStore
	role       *lease.Lease
	partitions *lease.Partition // nil without Config.Partitions
	instanceID string
	address    string
	adminToken string
	users      userTokens
	fake       *graphtest.Engine // nil with a real engine
	log        *slog.Logger
	probes     http.Handler // readiness and liveness, for the orchestrator
	metrics    http.Handler // Prometheus, for the operators
	tracer     trace.Tracer // a span per profile request

	cycles atomic.Int64 // maintenance cycles this instance ran
}

// createTables creates the service's own tables. Instances may start
// together; the advisory lock makes them do it one after another.
func createTables(ctx context.Context, pool *pgxpool.Pool) error {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("creating the tables: %w", err)
	}
	defer tx.Rollback(ctx)
	for _, stmt := range []string{
		`SELECT pg_advisory_xact_lock(hashtext('baton examples/profiles: create tables'))`,
		`CREATE TABLE IF NOT EXISTS profiles (
			id         text PRIMARY KEY,
			owner_id   text NOT NULL,
			label      text NOT NULL DEFAULT '',
			created_at timestamptz NOT NULL DEFAULT now(),
			updated_at timestamptz NOT NULL DEFAULT now()
		)`,
		// One row: the last maintenance cycle, written with the role's
		// fencing token so that a deposed holder cannot overwrite it.
		`CREATE TABLE IF NOT EXISTS profile_maintenance (
			id       int PRIMARY KEY CHECK (id = 1),
			instance text NOT NULL,
			token    bigint NOT NULL,
			profiles bigint NOT NULL,
			ran_at   timestamptz NOT NULL
		)`,
	} {
		if _, err := tx.Exec(ctx, stmt); err != nil {
			return fmt.Errorf("creating the tables: %w", err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("creating the tables: %w", err)
	}
	return nil
}

// routes are the service's handlers. The profile API wants a user's token
// and works on that user's profiles only; everything an operator uses wants
// the admin token. Authentication runs on the instance that serves the
// request: the holder proxy, outermost, forwards the credentials to the
// holder with the request.
func (s *service) routes() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("POST /profiles", s.asUser(s.createProfile))
	mux.Handle("GET /profiles/{id}", s.asUser(s.getProfile))
	mux.Handle("PUT /profiles/{id}/label", s.asUser(s.relabelProfile))
	admin := func(h http.HandlerFunc) http.Handler { return requireBearer(s.adminToken, h) }
	mux.Handle("GET /status", admin(s.status))
	// Behind the holder proxy: these run on the holder of the role only.
	mux.Handle("GET /maintenance", admin(s.serveMaintenance))
	mux.Handle("POST /maintenance/run", admin(s.runMaintenance))
	mux.Handle("/admin/outbox/", requireBearer(s.adminToken,
		http.StripPrefix("/admin/outbox", outbox.AdminHandler(s.outbox, s.log))))
	if s.fake != nil {
		mux.Handle("GET /engine/deliveries", admin(s.engineDeliveries))
	}
	// The probes want no token (the orchestrator has none) and show no
	// errors; the metrics are the operators'.
	mux.Handle("/healthz/", http.StripPrefix("/healthz", s.probes))
	mux.Handle("GET /metrics", admin(s.metrics.ServeHTTP))
	return mux
}

// profile is a profile as the API shows it.
type profile struct {
	ID    string `json:"id"`
	Owner string `json:"owner"`
	Label string `json:"label"`
}

// createRequest is what POST /profiles takes. There is no owner: the owner
// is the authenticated user, and a body that names one is refused.
type createRequest struct {
	ID    string `json:"id"`
	Label string `json:"label"`
}

// createProfile writes the profile's row, owned by the user, and announces
// it to the graph engine (graph.init, and graph.metadata for its label) in
// one transaction.
func (s *service) createProfile(w http.ResponseWriter, r *http.Request, user string) {
	var req createRequest
	if !readJSON(w, r, &req) {
		return
	}
	p := profile{ID: req.ID, Owner: user, Label: req.Label}
	if p.ID == "" {
		p.ID = outbox.NewID().String()
	}
	announce := graph.InitPayload{
		ResourceType: entityType,
		ResourceID:   p.ID,
		Relations:    []graph.Relation{{Relation: "owner", SubjectType: "user", SubjectID: p.Owner}},
		RequestedBy:  p.Owner,
	}
	meta := graph.MetadataPayload{EntityType: entityType, EntityID: p.ID, Label: p.Label}
	if err := errors.Join(announce.Validate(), meta.Validate()); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}

	ctx := r.Context()
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		s.fail(w, "begin", err)
		return
	}
	defer tx.Rollback(ctx)
	// The profile's row is the transaction's first write: it takes the xid
	// that orders this transaction's entries in the outbox.
	if _, err := tx.Exec(ctx, `INSERT INTO profiles (id, owner_id, label) VALUES ($1, $2, $3)`,
		p.ID, p.Owner, p.Label); err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "23505" {
			writeError(w, http.StatusConflict, fmt.Sprintf("profile %q exists already", p.ID))
			return
		}
		s.fail(w, "insert", err)
		return
	}
	// Entries of one transaction are delivered in id order, and two UUIDv7
	// made in the same millisecond are in random order: order them, so that
	// the engine hears of the profile before its label.
	initID, metaID := outbox.NewID(), outbox.NewID()
	if metaID.Compare(initID) < 0 {
		initID, metaID = metaID, initID
	}
	enqueue := s.enqueueOn(tx)
	if err := graph.EnqueueInit(ctx, enqueue, initID, announce); err != nil {
		s.fail(w, "enqueue graph.init", err)
		return
	}
	if p.Label != "" {
		if err := graph.EnqueueMetadata(ctx, enqueue, metaID, meta); err != nil {
			s.fail(w, "enqueue graph.metadata", err)
			return
		}
	}
	if err := tx.Commit(ctx); err != nil {
		s.fail(w, "commit", err)
		return
	}
	writeJSON(w, http.StatusCreated, p)
}

// relabelProfile changes the label of one of the user's profiles and
// announces it (graph.metadata) in one transaction. Another user's profile
// is answered as if it did not exist.
func (s *service) relabelProfile(w http.ResponseWriter, r *http.Request, user string) {
	var body struct {
		Label string `json:"label"`
	}
	if !readJSON(w, r, &body) {
		return
	}
	p := profile{ID: r.PathValue("id"), Label: body.Label}
	meta := graph.MetadataPayload{EntityType: entityType, EntityID: p.ID, Label: p.Label}
	if err := meta.Validate(); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}

	ctx := r.Context()
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		s.fail(w, "begin", err)
		return
	}
	defer tx.Rollback(ctx)
	// Lock the row first. SELECT … FOR UPDATE takes no xid, so a concurrent
	// relabel of this profile waits here, before it has one, and takes its
	// xid (and its place in the outbox) after this transaction commits.
	err = tx.QueryRow(ctx, `SELECT owner_id FROM profiles WHERE id = $1 AND owner_id = $2 FOR UPDATE`, p.ID, user).Scan(&p.Owner)
	if errors.Is(err, pgx.ErrNoRows) {
		writeError(w, http.StatusNotFound, fmt.Sprintf("no profile %q", p.ID))
		return
	}
	if err != nil {
		s.fail(w, "lock the profile", err)
		return
	}
	if _, err := tx.Exec(ctx, `UPDATE profiles SET label = $2, updated_at = now() WHERE id = $1`, p.ID, p.Label); err != nil {
		s.fail(w, "update", err)
		return
	}
	// Then the enqueue, after the entity's write, on the same transaction.
	if err := graph.EnqueueMetadata(ctx, s.enqueueOn(tx), outbox.NewID(), meta); err != nil {
		s.fail(w, "enqueue graph.metadata", err)
		return
	}
	if err := tx.Commit(ctx); err != nil {
		s.fail(w, "commit", err)
		return
	}
	writeJSON(w, http.StatusOK, p)
}

// enqueueOn adapts the outbox store's Enqueue to graph.EnqueueFunc on tx.
// Each entry carries the request's trace context (otelbaton.Inject), so
// the span of the run that delivers it links to the request's span.
func (s *service) enqueueOn(tx pgx.Tx) graph.EnqueueFunc {
	return func(ctx context.Context, id outbox.ID, lane string, payload []byte) error {
		return s.outbox.Enqueue(otelbaton.Inject(ctx), tx, id, lane, payload)
	}
}

// getProfile answers one of the user's profiles; another user's is
// answered as if it did not exist.
func (s *service) getProfile(w http.ResponseWriter, r *http.Request, user string) {
	p := profile{ID: r.PathValue("id")}
	err := s.pool.QueryRow(r.Context(), `SELECT owner_id, label FROM profiles WHERE id = $1 AND owner_id = $2`,
		p.ID, user).Scan(&p.Owner, &p.Label)
	if errors.Is(err, pgx.ErrNoRows) {
		writeError(w, http.StatusNotFound, fmt.Sprintf("no profile %q", p.ID))
		return
	}
	if err != nil {
		s.fail(w, "read", err)
		return
	}
	writeJSON(w, http.StatusOK, p)
}

// statusReport is what GET /status answers: this instance's view.
type statusReport struct {
	Instance    string            `json:"instance"`
	Address     string            `json:"address"`
	Maintenance maintenanceStatus `json:"maintenance"`
	// Partitions is the partition set, when the service has one.
	Partitions *partitionStatus `json:"partitions,omitempty"`
}

type partitionStatus struct {
	Name  string `json:"name"`
	Count int    `json:"count"`
	// Held lists the partitions this instance holds right now.
	Held []int `json:"held"`
}

type maintenanceStatus struct {
	Role string `json:"role"`
	// Held is this instance's IsHeld, right now.
	Held  bool   `json:"held"`
	Token uint64 `json:"token"`
	// Holder and HolderAddress are the last heartbeat's snapshot.
	Holder        string `json:"holder"`
	HolderAddress string `json:"holderAddress"`
	// Cycles is how many maintenance cycles this instance has run.
	Cycles int64 `json:"cycles"`
}

func (s *service) status(w http.ResponseWriter, r *http.Request) {
	var parts *partitionStatus
	if p := s.partitions; p != nil {
		parts = &partitionStatus{Name: PartitionSet, Count: p.Count(), Held: []int{}}
		for i := range p.Count() {
			if p.Lease(i).IsHeld() {
				parts.Held = append(parts.Held, i)
			}
		}
	}
	writeJSON(w, http.StatusOK, statusReport{
		Instance: s.instanceID,
		Address:  s.address,
		Maintenance: maintenanceStatus{
			Role:          s.role.Role(),
			Held:          s.role.IsHeld(),
			Token:         s.role.Token(),
			Holder:        s.role.CurrentHolder(),
			HolderAddress: s.role.CurrentHolderAddress(),
			Cycles:        s.cycles.Load(),
		},
		Partitions: parts,
	})
}

// engineDeliveries lists what the in-process fake engine received.
func (s *service) engineDeliveries(w http.ResponseWriter, r *http.Request) {
	type delivery struct {
		Lane    string          `json:"lane"`
		Path    string          `json:"path"`
		EntryID outbox.ID       `json:"entryId"`
		Payload json.RawMessage `json:"payload"`
		At      time.Time       `json:"at"`
	}
	out := []delivery{}
	for _, d := range s.fake.Deliveries() {
		out = append(out, delivery{Lane: d.Lane, Path: d.Path, EntryID: d.EntryID, Payload: d.Payload, At: d.At})
	}
	writeJSON(w, http.StatusOK, map[string]any{"deliveries": out})
}

// requireBearer lets a request through only with "Authorization: Bearer
// token". An empty token turns the handler off.
func requireBearer(token string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if token == "" {
			writeError(w, http.StatusNotFound, "the operator routes are off; start the service with "+envAdminToken+" set")
			return
		}
		got, ok := bearer(r)
		if !ok || subtle.ConstantTimeCompare([]byte(got), []byte(token)) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="profiles admin"`)
			writeError(w, http.StatusUnauthorized, "this route needs the admin token as a bearer token")
			return
		}
		next.ServeHTTP(w, r)
	})
}

// bearer is the request's bearer token.
func bearer(r *http.Request) (string, bool) {
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	return got, ok && got != ""
}

// userTokens authenticates users by bearer token: the example's minimal
// stand-in for a real identity provider (sessions, OIDC, mTLS...).
type userTokens []userToken

type userToken struct{ name, token string }

func newUserTokens(users map[string]string) userTokens {
	out := make(userTokens, 0, len(users))
	for name, token := range users {
		out = append(out, userToken{name: name, token: token})
	}
	return out
}

// identify returns the user whose token the request carries. Every token
// is compared, in constant time, so the answer's timing does not tell how
// much of a guess was right or whose token it was close to.
func (u userTokens) identify(r *http.Request) (string, bool) {
	got, ok := bearer(r)
	if !ok {
		return "", false
	}
	who := ""
	for _, t := range u {
		if subtle.ConstantTimeCompare([]byte(got), []byte(t.token)) == 1 {
			who = t.name
		}
	}
	return who, who != ""
}

// asUser runs h with the authenticated user, in a span of the request's
// own, or answers 401.
func (s *service) asUser(h func(w http.ResponseWriter, r *http.Request, user string)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		user, ok := s.users.identify(r)
		if !ok {
			w.Header().Set("WWW-Authenticate", `Bearer realm="profiles"`)
			writeError(w, http.StatusUnauthorized, "the profile API needs a user's token as a bearer token")
			return
		}
		ctx, span := s.tracer.Start(r.Context(), r.Pattern, trace.WithSpanKind(trace.SpanKindServer))
		defer span.End()
		h(w, r.WithContext(ctx), user)
	})
}

// readJSON decodes the request body into v, or answers 400.
func readJSON(w http.ResponseWriter, r *http.Request, v any) bool {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		writeError(w, http.StatusBadRequest, "the body must be a JSON object: "+err.Error())
		return false
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		writeError(w, http.StatusBadRequest, "the body must hold one JSON object")
		return false
	}
	return true
}

// fail answers 500 for an unexpected error, which is logged.
func (s *service) fail(w http.ResponseWriter, step string, err error) {
	s.log.Error("request failed", "step", step, "err", err)
	writeError(w, http.StatusInternalServerError, step+" failed; see the server log")
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]string{"error": msg})
}
