package console

import (
	"bytes"
	"context"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/baton-go/baton/core/health"
	"github.com/baton-go/baton/core/lease"
	"github.com/baton-go/baton/core/outbox"
)

//go:embed templates
var templateFS embed.FS

// maxFormBytes bounds a form's body: a token and a few short fields.
const maxFormBytes = 16 << 10

// Handler serves the console. Create it with NewHandler.
type Handler struct {
	opts  Options
	log   *slog.Logger
	csrf  signer
	pages map[string]*template.Template
	h     http.Handler
}

// The pages, each a template of its own over the layout.
var pageNames = []string{"overview", "dead", "letter", "confirm", "error"}

// NewHandler validates opts and returns the console.
func NewHandler(opts Options) (*Handler, error) {
	opts = opts.withDefaults()
	if err := opts.validate(); err != nil {
		return nil, err
	}
	c := &Handler{opts: opts, log: opts.Logger, csrf: signer{key: bytes.Clone(opts.CSRFKey), ttl: opts.TokenTTL},
		pages: map[string]*template.Template{}}
	for _, name := range pageNames {
		t, err := template.New("layout.html").Funcs(templateFuncs).ParseFS(templateFS, "templates/layout.html", "templates/"+name+".html")
		if err != nil {
			return nil, fmt.Errorf("baton/console: template %s: %w", name, err)
		}
		c.pages[name] = t
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", c.overview)
	mux.HandleFunc("GET /dead", c.deadList)
	mux.HandleFunc("GET /dead/{id}", c.letter)
	mux.HandleFunc("GET /dead/{id}/confirm", c.confirmOne)
	mux.HandleFunc("POST /dead/{id}/requeue", c.requeueOne)
	mux.HandleFunc("GET /requeue/confirm", c.confirmBulk)
	mux.HandleFunc("POST /requeue", c.requeueBulk)
	mux.Handle("/api/outbox/", http.StripPrefix("/api/outbox", outbox.AdminHandler(opts.Outbox, opts.Logger)))
	// No catch-all route: it would answer a GET of a POST route before the
	// mux could answer 405.
	cop := http.NewCrossOriginProtection()
	cop.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c.log.Warn("console: cross-origin request refused", "method", r.Method, "path", r.URL.Path,
			"origin", r.Header.Get("Origin"), "sec_fetch_site", r.Header.Get("Sec-Fetch-Site"))
		c.fail(w, r, http.StatusForbidden, "A page of another site tried to change this outbox; nothing was changed.")
	}))
	var h http.Handler = cop.Handler(mux)
	if opts.Prefix != "" {
		h = http.StripPrefix(opts.Prefix, h)
	}
	c.h = h
	return c, nil
}

// ServeHTTP implements http.Handler.
func (c *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) { c.h.ServeHTTP(w, r) }

// page is what every template gets.
type page struct {
	Prefix string
	Title  string
	Nav    string // the section the page belongs to: overview or dead
	Data   any
}

// render writes the named page, with the headers that keep it inert: no
// script runs, nothing frames it, nothing caches it.
func (c *Handler) render(w http.ResponseWriter, status int, name, title, nav string, data any) {
	var buf bytes.Buffer
	if err := c.pages[name].Execute(&buf, page{Prefix: c.opts.Prefix, Title: title, Nav: nav, Data: data}); err != nil {
		c.log.Error("console: rendering a page failed", "page", name, "err", err)
		http.Error(w, "the page could not be rendered; see the server log", http.StatusInternalServerError)
		return
	}
	hd := w.Header()
	hd.Set("Content-Type", "text/html; charset=utf-8")
	hd.Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("X-Frame-Options", "DENY")
	hd.Set("Referrer-Policy", "no-referrer")
	hd.Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

type errorView struct {
	Status  int
	Text    string
	Message string
}

// fail answers with an error page.
func (c *Handler) fail(w http.ResponseWriter, _ *http.Request, status int, msg string) {
	c.render(w, status, "error", http.StatusText(status), "", errorView{Status: status, Text: http.StatusText(status), Message: msg})
}

// storeFailed answers a store call's error as the admin handler does
// (outbox.ErrorStatus), logging what it does not show.
func (c *Handler) storeFailed(w http.ResponseWriter, r *http.Request, what string, err error) {
	status, msg := outbox.ErrorStatus(err)
	if status == http.StatusInternalServerError {
		c.log.Warn("console: "+what+" failed", "err", err)
	}
	c.fail(w, r, status, msg)
}

// link is a URL of the console: the prefix, the path and the query.
func (c *Handler) link(path string, q url.Values) string {
	u := c.opts.Prefix + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	return u
}

// seeOther ends a POST with a redirect to a page, so a reload does not
// post again.
func (c *Handler) seeOther(w http.ResponseWriter, r *http.Request, path string, q url.Values) {
	http.Redirect(w, r, c.link(path, q), http.StatusSeeOther)
}

// The overview.

type overviewView struct {
	Health      outbox.Health
	Failing     bool
	Counted     bool
	FromLog     bool // the outbox is read from the log: no cursor to count above
	Pending     count
	DeadWaiting count
	Driver      *health.Status
	Leases      *leasesView
	LeasesError string
}

// count is a backlog count, which stops at outbox.BacklogLimit.
type count struct{ N int }

func (n count) String() string {
	if n.N >= outbox.BacklogLimit {
		return strconv.Itoa(outbox.BacklogLimit) + " or more"
	}
	return strconv.Itoa(n.N)
}

func (c *Handler) overview(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	v := overviewView{}
	hl, err := outbox.ReadHealth(ctx, c.opts.Outbox)
	if err != nil {
		c.storeFailed(w, r, "reading the outbox's health", err)
		return
	}
	v.Health, v.Failing = hl, hl.Failing()
	if counter, ok := c.opts.Outbox.(outbox.Counter); ok {
		if v.Pending, v.DeadWaiting, v.FromLog, err = backlog(ctx, c.opts.Outbox, counter); err != nil {
			c.storeFailed(w, r, "counting the backlog", err)
			return
		}
		v.Counted = true
	}
	if c.opts.Driver != nil {
		st := c.opts.Driver.Status()
		v.Driver = &st
	}
	if c.opts.Leases != nil {
		list, err := lease.ListLeases(ctx, c.opts.Leases)
		if err != nil {
			// The outbox is what an operator came for: show it anyway.
			c.log.Warn("console: listing the leases failed", "err", err)
			v.LeasesError = "the lease store failed; see the server log"
		} else {
			v.Leases = newLeasesView(list)
		}
	}
	c.render(w, http.StatusOK, "overview", "Overview", "overview", v)
}

// backlog counts the entries after the stored cursor and the dead letters
// waiting, as the driver's backlog sample does; like it, it counts no
// pending entries for an outbox read from the log (fromLog), whose stored
// cursor no longer moves: its backlog is the slot's.
func backlog(ctx context.Context, s outbox.Store, counter outbox.Counter) (pending, dead count, fromLog bool, err error) {
	st, err := s.State(ctx)
	if err != nil {
		return count{}, count{}, false, err
	}
	if dead.N, err = counter.CountDead(ctx, outbox.BacklogLimit); err != nil {
		return count{}, count{}, false, err
	}
	if st[outbox.KeySource] == outbox.SourceLogical {
		return count{}, dead, true, nil
	}
	cur, err := outbox.CursorFromState(st)
	if err != nil {
		return count{}, count{}, false, err
	}
	if pending.N, err = counter.CountPending(ctx, cur, outbox.BacklogLimit); err != nil {
		return count{}, count{}, false, err
	}
	return pending, dead, false, nil
}

// The leases, by partition set.

type leasesView struct {
	Roles      []leaseRow
	Partitions []partitionView
}

type partitionView struct {
	Name       string
	Count      int
	Held       int
	Partitions []leaseRow
}

type leaseRow struct {
	lease.Listed
	Index int
}

func newLeasesView(list []lease.Listed) *leasesView {
	v := &leasesView{}
	at := map[string]int{}
	for _, l := range list {
		name, i, ok := lease.SplitPartitionRole(l.Role)
		if !ok {
			v.Roles = append(v.Roles, leaseRow{Listed: l})
			continue
		}
		k, seen := at[name]
		if !seen {
			k = len(v.Partitions)
			at[name] = k
			v.Partitions = append(v.Partitions, partitionView{Name: name})
		}
		p := &v.Partitions[k]
		p.Count++
		if l.Live {
			p.Held++
		}
		p.Partitions = append(p.Partitions, leaseRow{Listed: l, Index: i})
	}
	return v
}

// The dead letters.

type deadView struct {
	Query     outbox.DeadQuery
	Lane      string
	State     string
	Letters   []outbox.DeadLetter
	Next      string
	First     string
	Bulk      string
	Requeued  int
	Refreshed bool
}

func (c *Handler) deadList(w http.ResponseWriter, r *http.Request) {
	q, err := outbox.ParseDeadQuery(r.URL.Query())
	if err != nil {
		c.fail(w, r, http.StatusBadRequest, err.Error())
		return
	}
	limit := q.Options.Limit
	if limit == 0 {
		limit = c.opts.PageSize
	}
	opts := q.Options
	opts.Limit = limit
	list, err := outbox.ListDeadMatching(r.Context(), c.opts.Outbox, opts, q.Filter)
	if err != nil {
		c.storeFailed(w, r, "listing dead letters", err)
		return
	}
	for i := range list {
		list[i].Payload = nil // listings never carry payloads
	}
	v := deadView{Query: q, Lane: q.Filter.Lane, State: string(q.Filter.State), Letters: list}
	if len(list) == limit {
		next := q
		next.Options.Before = list[len(list)-1].ID
		v.Next = c.link("/dead", next.Values())
	}
	if !q.Options.Before.IsNil() {
		first := q
		first.Options.Before = outbox.NilID
		v.First = c.link("/dead", first.Values())
	}
	if q.Filter.State != outbox.DeadRequeued {
		v.Bulk = c.link("/requeue/confirm", laneQuery(q.Filter.Lane))
	}
	if n, err := strconv.Atoi(r.URL.Query().Get("requeued")); err == nil && n >= 0 {
		v.Requeued, v.Refreshed = n, true
	}
	c.render(w, http.StatusOK, "dead", "Dead letters", "dead", v)
}

func laneQuery(lane string) url.Values {
	if lane == "" {
		return nil
	}
	return url.Values{"lane": {lane}}
}

// pathID reads the {id} of a route; a bad one is answered 400.
func (c *Handler) pathID(w http.ResponseWriter, r *http.Request) (outbox.ID, bool) {
	id, err := outbox.ParseID(r.PathValue("id"))
	if err != nil || id.IsNil() {
		c.fail(w, r, http.StatusBadRequest, "The id must be a dead letter's id (a UUID).")
		return outbox.NilID, false
	}
	return id, true
}

// deadLetter reads the dead letter the path names, or answers the
// request itself (a bad id, a store failure) and reports false.
func (c *Handler) deadLetter(w http.ResponseWriter, r *http.Request) (outbox.DeadLetter, bool) {
	id, ok := c.pathID(w, r)
	if !ok {
		return outbox.DeadLetter{}, false
	}
	d, err := c.opts.Outbox.GetDead(r.Context(), id)
	if err != nil {
		c.storeFailed(w, r, "reading a dead letter", err)
		return outbox.DeadLetter{}, false
	}
	return d, true
}

type letterView struct {
	outbox.DeadLetter
	Payload    payloadView
	Confirm    string
	JustQueued bool
}

func (c *Handler) letter(w http.ResponseWriter, r *http.Request) {
	d, ok := c.deadLetter(w, r)
	if !ok {
		return
	}
	v := letterView{DeadLetter: d, Payload: newPayloadView(d.Payload), JustQueued: r.URL.Query().Has("requeued")}
	if d.State() == outbox.DeadWaiting {
		v.Confirm = c.link("/dead/"+d.ID.String()+"/confirm", nil)
	}
	c.render(w, http.StatusOK, "letter", "Dead letter "+d.ID.String(), "dead", v)
}

// confirmView is a confirmation page: what will be requeued, and the form
// that does it.
type confirmView struct {
	// Count is how many dead letters the form requeues; 0 shows no form.
	Count   int
	Letter  *outbox.DeadLetter // a single requeue's
	Lane    string             // a bulk requeue's, "" for every lane
	Action  string
	Token   string
	Limit   int
	Cancel  string
	Already bool // the single dead letter was requeued before
}

func (c *Handler) confirmOne(w http.ResponseWriter, r *http.Request) {
	d, ok := c.deadLetter(w, r)
	if !ok {
		return
	}
	id := d.ID
	d.Payload = nil
	action := "/dead/" + id.String() + "/requeue"
	v := confirmView{Letter: &d, Cancel: c.link("/dead/"+id.String(), nil)}
	if d.State() == outbox.DeadWaiting {
		v.Count, v.Action, v.Token = 1, c.link(action, nil), c.csrf.issue(action, time.Now())
	} else {
		v.Already = true
	}
	c.render(w, http.StatusOK, "confirm", "Requeue a dead letter?", "dead", v)
}

// checkForm reads a POST's form and refuses it, 403, unless it carries a
// valid token for action.
func (c *Handler) checkForm(w http.ResponseWriter, r *http.Request, action string) bool {
	r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
	if err := r.ParseForm(); err != nil {
		c.fail(w, r, http.StatusBadRequest, "The form could not be read.")
		return false
	}
	if err := c.csrf.check(r.PostForm.Get(csrfField), action, time.Now()); err != nil {
		c.log.Warn("console: form refused", "path", r.URL.Path, "reason", err)
		msg := "This form was not issued by this console for this action; nothing was changed. Go back, reload the page and confirm again."
		if errors.Is(err, errExpiredToken) {
			msg = "This form has expired; nothing was changed. Go back, reload the page and confirm again."
		}
		c.fail(w, r, http.StatusForbidden, msg)
		return false
	}
	return true
}

func (c *Handler) requeueOne(w http.ResponseWriter, r *http.Request) {
	id, ok := c.pathID(w, r)
	if !ok {
		return
	}
	if !c.checkForm(w, r, "/dead/"+id.String()+"/requeue") {
		return
	}
	newID := outbox.NewID()
	if err := c.opts.Outbox.Requeue(r.Context(), id, newID); err != nil {
		c.storeFailed(w, r, "requeueing a dead letter", err)
		return
	}
	c.log.Info("outbox: dead letter requeued", "id", id, "requeued_as", newID, "by", "console")
	c.seeOther(w, r, "/dead/"+id.String(), url.Values{"requeued": {"1"}})
}

// bulkRequest is the bulk requeue the console offers: the waiting dead
// letters of one lane, or of every lane, at most limit of them.
func bulkRequest(lane string, limit int, dryRun bool) outbox.RequeueConfig {
	return outbox.RequeueRequest{Lane: lane, WaitingOnly: true, Limit: limit, DryRun: dryRun}.Config()
}

func (c *Handler) confirmBulk(w http.ResponseWriter, r *http.Request) {
	lane := r.URL.Query().Get("lane")
	count := bulkRequest(lane, 0, true)
	count.BatchSize = outbox.MaxRequeueBatch // it only reads: as few round trips as it can
	res, err := outbox.RequeueDead(r.Context(), c.opts.Outbox, count)
	if err != nil {
		c.storeFailed(w, r, "counting the dead letters to requeue", err)
		return
	}
	const action = "/requeue"
	v := confirmView{Count: len(res.Requeued), Lane: lane, Cancel: c.link("/dead", withState(laneQuery(lane), outbox.DeadWaiting))}
	if v.Count > 0 {
		v.Action, v.Token, v.Limit = c.link(action, nil), c.csrf.issue(action, time.Now()), v.Count
	}
	c.render(w, http.StatusOK, "confirm", "Requeue dead letters?", "dead", v)
}

func withState(q url.Values, st outbox.DeadState) url.Values {
	if q == nil {
		q = url.Values{}
	}
	q.Set("state", string(st))
	return q
}

func (c *Handler) requeueBulk(w http.ResponseWriter, r *http.Request) {
	if !c.checkForm(w, r, "/requeue") {
		return
	}
	lane := r.PostForm.Get("lane")
	limit, err := strconv.Atoi(r.PostForm.Get("limit"))
	if err != nil || limit < 1 {
		c.fail(w, r, http.StatusBadRequest, "The form must say how many dead letters to requeue (limit, at least 1).")
		return
	}
	// At most as many as the confirmation page counted: dead letters
	// parked since were not confirmed.
	res, err := outbox.RequeueDead(r.Context(), c.opts.Outbox, bulkRequest(lane, limit, false))
	if n := len(res.Requeued); n > 0 {
		c.log.Info("outbox: dead letters requeued in bulk", "lane", lane, "requeued", n, "confirmed", limit, "by", "console")
	}
	if err != nil {
		c.log.Warn("console: bulk requeue failed", "lane", lane, "requeued", len(res.Requeued), "err", err)
		c.fail(w, r, http.StatusInternalServerError,
			fmt.Sprintf("The requeue stopped on a store error after requeueing %d dead letters; see the server log, then look at the list and try again.", len(res.Requeued)))
		return
	}
	q := withState(laneQuery(lane), outbox.DeadRequeued)
	q.Set("requeued", strconv.Itoa(len(res.Requeued)))
	c.seeOther(w, r, "/dead", q)
}
