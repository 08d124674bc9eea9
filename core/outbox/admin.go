package outbox

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Health is the outbox's self-reported state: the stamps of the last
// passes, each nil when it was never written. It is always answerable, even
// for an outbox that never scanned.
type Health struct {
	LastScannedXID               *string    `json:"last_scanned_xid"`
	LastScannedID                *string    `json:"last_scanned_id"`
	LastScanAt                   *time.Time `json:"last_scan_at"`
	FailedAttempts               *int       `json:"failed_attempts"`
	LastError                    *string    `json:"last_error"`
	LastErrorAt                  *time.Time `json:"last_error_at"`
	LastDeadLetterAt             *time.Time `json:"last_dead_letter_at"`
	LastDeadLetterNotificationAt *time.Time `json:"last_dead_letter_notification_at"`
	FirstStuckAt                 *time.Time `json:"first_stuck_at"`
	LastStuckNotificationAt      *time.Time `json:"last_stuck_notification_at"`
}

// Failing reports whether the outbox is in a failing streak: the last
// pass stopped at a retry or failed. A LastError outlives its streak; once
// it is over, the error is history, dated by LastErrorAt.
func (h Health) Failing() bool { return h.FirstStuckAt != nil }

// ReadHealth reads the state stamps.
func ReadHealth(ctx context.Context, s Store) (Health, error) {
	st, err := s.State(ctx)
	if err != nil {
		return Health{}, err
	}
	str := func(k string) *string {
		if v, ok := st[k]; ok {
			return &v
		}
		return nil
	}
	tm := func(k string) *time.Time {
		if t, ok := parseStamp(st[k]); ok {
			return &t
		}
		return nil
	}
	h := Health{
		LastScannedXID:               str(KeyLastScannedXID),
		LastScannedID:                str(KeyLastScannedID),
		LastScanAt:                   tm(KeyLastScanAt),
		LastError:                    str(KeyLastError),
		LastErrorAt:                  tm(KeyLastErrorAt),
		LastDeadLetterAt:             tm(KeyLastDeadLetterAt),
		LastDeadLetterNotificationAt: tm(KeyLastDeadLetterNotificationAt),
		FirstStuckAt:                 tm(KeyFirstStuckAt),
		LastStuckNotificationAt:      tm(KeyLastStuckNotificationAt),
	}
	if n, err := strconv.Atoi(st[KeyFailedAttempts]); err == nil {
		h.FailedAttempts = &n
	}
	return h, nil
}

// DeadLetterJSON is a dead letter as the admin handler shows it, and as
// baton's CLI prints it with --json.
type DeadLetterJSON struct {
	ID         ID              `json:"id"`
	XID        string          `json:"xid"` // a string: xids exceed JSON's safe integers
	Lane       string          `json:"lane"`
	Error      string          `json:"error"`
	ParkedAt   time.Time       `json:"parked_at"`
	RequeuedAs *ID             `json:"requeued_as"`
	RequeuedAt *time.Time      `json:"requeued_at"`
	Payload    json.RawMessage `json:"payload,omitempty"`
}

// JSON is d as DeadLetterJSON.
func (d DeadLetter) JSON() DeadLetterJSON {
	out := DeadLetterJSON{
		ID: d.ID, XID: strconv.FormatUint(d.XID, 10), Lane: d.Lane, Error: d.Error, ParkedAt: d.ParkedAt,
	}
	if !d.RequeuedAs.IsNil() {
		r, at := d.RequeuedAs, d.RequeuedAt
		out.RequeuedAs, out.RequeuedAt = &r, &at
	}
	if d.Payload != nil {
		out.Payload = json.RawMessage(d.Payload)
	}
	return out
}

// AdminHandler serves the outbox's operator API. Mount it behind your own
// authentication, under a prefix of your choice (with http.StripPrefix):
//
//	GET  /lanes               health stamps; always 200, null where absent
//	GET  /dead?limit=&before= dead letters, newest first, without payloads;
//	     &lane=&state=        lane and state (waiting, requeued) filter them
//	GET  /dead/{id}           one dead letter with its payload
//	POST /dead/{id}/requeue   requeue it as a new entry at the end of the order
//	POST /dead/requeue        bulk requeue (RequeueDead); a JSON body of
//	                          RequeueRequest chooses which, and dry_run counts
//
// A requeue is refused when a browser says it comes from another origin
// (http.CrossOriginProtection: Sec-Fetch-Site, or Origin against Host),
// 403, and when its body is of a type an HTML form can send
// (application/x-www-form-urlencoded, multipart/form-data, text/plain),
// 415. Behind cookie authentication a page on any site could otherwise
// make an operator's browser requeue. Clients that send no body, or JSON,
// and pages of the handler's own origin are not affected.
//
// logger may be nil.
func AdminHandler(s Store, logger *slog.Logger) http.Handler {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	a := &admin{s: s, log: logger}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /lanes", a.lanes)
	mux.HandleFunc("GET /dead", a.list)
	mux.HandleFunc("GET /dead/{id}", a.show)
	mux.HandleFunc("POST /dead/{id}/requeue", a.requeue)
	mux.HandleFunc("POST /dead/requeue", a.requeueBulk)
	cop := http.NewCrossOriginProtection()
	cop.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a.log.Warn("outbox admin: cross-origin request refused", "method", r.Method, "path", r.URL.Path,
			"origin", r.Header.Get("Origin"), "sec_fetch_site", r.Header.Get("Sec-Fetch-Site"))
		writeError(w, http.StatusForbidden, "cross-origin request refused: call the admin API from its own origin, or from a client that is not a browser")
	}))
	return cop.Handler(noFormBodies(mux))
}

// formTypes are the request content types a browser sends cross-site
// without asking the server first (a form, or a "simple" fetch).
var formTypes = []string{"application/x-www-form-urlencoded", "multipart/form-data", "text/plain"}

// mediaType is a Content-Type without parameters, in lower case; a value
// mime cannot parse is cut at its first ';'.
func mediaType(ct string) string {
	if mt, _, err := mime.ParseMediaType(ct); err == nil {
		return mt
	}
	mt, _, _ := strings.Cut(ct, ";")
	return strings.ToLower(strings.TrimSpace(mt))
}

// noFormBodies refuses a state-changing request whose body has one of
// formTypes. CrossOriginProtection relies on the browser's Sec-Fetch-Site
// or Origin; an old browser that sends neither would still be stopped.
func noFormBodies(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.Method {
		case http.MethodGet, http.MethodHead, http.MethodOptions:
		default:
			if slices.Contains(formTypes, mediaType(r.Header.Get("Content-Type"))) {
				writeError(w, http.StatusUnsupportedMediaType, "a form body is refused: send no body, or application/json")
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

type admin struct {
	s   Store
	log *slog.Logger
}

func (a *admin) lanes(w http.ResponseWriter, r *http.Request) {
	h, err := ReadHealth(r.Context(), a.s)
	if err != nil {
		a.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, h)
}

func (a *admin) list(w http.ResponseWriter, r *http.Request) {
	q, err := ParseDeadQuery(r.URL.Query())
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	dead, err := ListDeadMatching(r.Context(), a.s, q.Options, q.Filter)
	if err != nil {
		a.fail(w, err)
		return
	}
	out := make([]DeadLetterJSON, len(dead))
	for i, d := range dead {
		d.Payload = nil // listings never carry payloads
		out[i] = d.JSON()
	}
	writeJSON(w, http.StatusOK, map[string]any{"dead_letters": out})
}

func (a *admin) show(w http.ResponseWriter, r *http.Request) {
	id, ok := pathID(w, r)
	if !ok {
		return
	}
	d, err := a.s.GetDead(r.Context(), id)
	if err != nil {
		a.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, d.JSON())
}

func (a *admin) requeue(w http.ResponseWriter, r *http.Request) {
	id, ok := pathID(w, r)
	if !ok {
		return
	}
	newID := NewID()
	if err := a.s.Requeue(r.Context(), id, newID); err != nil {
		a.fail(w, err)
		return
	}
	a.log.Info("outbox: dead letter requeued", "id", id, "requeued_as", newID)
	writeJSON(w, http.StatusOK, map[string]ID{"id": id, "requeued_as": newID})
}

// RequeueRequest is the JSON body of POST /dead/requeue; every field is
// optional, and an empty body requeues every dead letter waiting or not
// (the requeued ones are refused and counted).
type RequeueRequest struct {
	Lane         string     `json:"lane"`
	WaitingOnly  bool       `json:"waiting_only"`
	ParkedSince  *time.Time `json:"parked_since"`
	ParkedBefore *time.Time `json:"parked_before"`
	Limit        int        `json:"limit"`
	DryRun       bool       `json:"dry_run"`
}

// Config is the RequeueConfig the request asks for.
func (q RequeueRequest) Config() RequeueConfig {
	c := RequeueConfig{Filter: RequeueFilter{Lane: q.Lane, WaitingOnly: q.WaitingOnly}, Limit: q.Limit, DryRun: q.DryRun}
	if q.ParkedSince != nil {
		c.Filter.ParkedSince = *q.ParkedSince
	}
	if q.ParkedBefore != nil {
		c.Filter.ParkedBefore = *q.ParkedBefore
	}
	return c
}

// RequeueReport is the JSON answer of a bulk requeue.
type RequeueReport struct {
	DryRun          bool           `json:"dry_run"`
	Requeued        int            `json:"requeued"`
	AlreadyRequeued int            `json:"already_requeued"`
	Batches         int            `json:"batches"`
	Entries         []RequeuedJSON `json:"entries"`
}

// RequeuedJSON is one dead letter of a RequeueReport.
type RequeuedJSON struct {
	ID         ID  `json:"id"`
	RequeuedAs *ID `json:"requeued_as"`
}

// Report is the JSON form of r.
func (r RequeueResult) Report() RequeueReport {
	out := RequeueReport{DryRun: r.DryRun, Requeued: len(r.Requeued), AlreadyRequeued: r.AlreadyRequeued,
		Batches: r.Batches, Entries: make([]RequeuedJSON, len(r.Requeued))}
	for i, q := range r.Requeued {
		out.Entries[i].ID = q.ID
		if !q.RequeuedAs.IsNil() {
			as := q.RequeuedAs
			out.Entries[i].RequeuedAs = &as
		}
	}
	return out
}

func (a *admin) requeueBulk(w http.ResponseWriter, r *http.Request) {
	var q RequeueRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<16))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&q); err != nil && !errors.Is(err, io.EOF) {
		writeError(w, http.StatusBadRequest, "the body must be a JSON object with lane, waiting_only, parked_since, parked_before, limit and dry_run, all optional: "+err.Error())
		return
	}
	cfg := q.Config()
	if err := cfg.withDefaults().validate(); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	res, err := RequeueDead(r.Context(), a.s, cfg)
	if err != nil {
		a.fail(w, err)
		return
	}
	a.log.Info("outbox: dead letters requeued in bulk", "lane", q.Lane, "waiting_only", q.WaitingOnly,
		"dry_run", q.DryRun, "requeued", len(res.Requeued), "already_requeued", res.AlreadyRequeued)
	writeJSON(w, http.StatusOK, res.Report())
}

func pathID(w http.ResponseWriter, r *http.Request) (ID, bool) {
	id, err := ParseID(r.PathValue("id"))
	if err != nil {
		writeError(w, http.StatusBadRequest, "the id must be a UUID")
		return NilID, false
	}
	return id, true
}

func (a *admin) fail(w http.ResponseWriter, err error) {
	status, msg := ErrorStatus(err)
	if status == http.StatusInternalServerError {
		a.log.Warn("outbox admin: store error", "err", err)
	}
	writeError(w, status, msg)
}

// ErrorStatus is the HTTP status and the message an operator's view
// answers a dead-letter call's error with: 404 for an unknown dead letter,
// 409 for one requeued before, 500 (say nothing of the store, log it) for
// anything else.
func ErrorStatus(err error) (status int, msg string) {
	switch {
	case errors.Is(err, ErrNotFound):
		return http.StatusNotFound, "no such dead letter"
	case errors.Is(err, ErrAlreadyRequeued):
		return http.StatusConflict, "this dead letter was requeued already"
	}
	return http.StatusInternalServerError, "the outbox store failed; see the server log"
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]string{"error": msg})
}
