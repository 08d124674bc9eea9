package console

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/baton-go/baton/backends/memory"
	"github.com/baton-go/baton/core/config"
	"github.com/baton-go/baton/core/health"
	"github.com/baton-go/baton/core/lease"
	"github.com/baton-go/baton/core/outbox"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var testKey = []byte("0123456789abcdef0123456789abcdef")

const prefix = "/ops"

// fixture is a console over memory stores, mounted at prefix, behind a
// test server.
type fixture struct {
	t      *testing.T
	out    *memory.OutboxStore
	leases *memory.LeaseStore
	h      *Handler
	srv    *httptest.Server
}

func newFixture(t *testing.T, change func(*Options)) *fixture {
	t.Helper()
	out, err := memory.NewOutboxStore(memory.OutboxStoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	leases, err := memory.NewLeaseStore(memory.LeaseStoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	opts := Options{Outbox: out, Leases: leases, CSRFKey: testKey, Prefix: prefix}
	if change != nil {
		change(&opts)
	}
	h, err := NewHandler(opts)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle(prefix+"/", h)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return &fixture{t: t, out: out, leases: leases, h: h, srv: srv}
}

// response is an answer, its body read.
type response struct {
	code int
	body string
	hdr  http.Header
}

// do sends a request and does not follow redirects.
func (f *fixture) do(method, path string, form url.Values, header http.Header) response {
	f.t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, f.srv.URL+path, body)
	if err != nil {
		f.t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for k, v := range header {
		req.Header[k] = v
	}
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := client.Do(req)
	if err != nil {
		f.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		f.t.Fatal(err)
	}
	return response{code: resp.StatusCode, body: string(b), hdr: resp.Header}
}

func (f *fixture) get(path string) response {
	f.t.Helper()
	return f.do(http.MethodGet, path, nil, nil)
}

// page gets a page that must answer 200.
func (f *fixture) page(path string) string {
	f.t.Helper()
	r := f.get(path)
	if r.code != http.StatusOK {
		f.t.Fatalf("GET %s: %d\n%s", path, r.code, r.body)
	}
	if ct := r.hdr.Get("Content-Type"); ct != "text/html; charset=utf-8" {
		f.t.Fatalf("GET %s: Content-Type %q", path, ct)
	}
	return r.body
}

// park commits an entry of lane and parks it with reason, as a pass of a
// driver whose processor refuses it would.
func (f *fixture) park(lane, payload, reason string) outbox.ID {
	f.t.Helper()
	ctx := context.Background()
	tx, err := f.out.Begin(ctx)
	if err != nil {
		f.t.Fatal(err)
	}
	id := outbox.NewID()
	if err := tx.Enqueue(ctx, id, lane, []byte(payload)); err != nil {
		f.t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		f.t.Fatal(err)
	}
	st, _ := f.out.State(ctx)
	from, _ := outbox.CursorFromState(st)
	entries, err := f.out.Scan(ctx, from, 100)
	if err != nil || len(entries) == 0 {
		f.t.Fatalf("scan: %v %v", entries, err)
	}
	e := entries[len(entries)-1]
	if err := f.out.Settle(ctx, outbox.Settlement{From: from, To: e.Cursor(), Park: []outbox.Parked{{Entry: e, Reason: reason}}}); err != nil {
		f.t.Fatal(err)
	}
	return id
}

// enqueue commits an entry that no pass has walked.
func (f *fixture) enqueue(lane string) outbox.ID {
	f.t.Helper()
	ctx := context.Background()
	tx, _ := f.out.Begin(ctx)
	id := outbox.NewID()
	if err := tx.Enqueue(ctx, id, lane, []byte(`{}`)); err != nil {
		f.t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		f.t.Fatal(err)
	}
	return id
}

func (f *fixture) dead(id outbox.ID) outbox.DeadLetter {
	f.t.Helper()
	d, err := f.out.GetDead(context.Background(), id)
	if err != nil {
		f.t.Fatal(err)
	}
	return d
}

// listed is the dead letters a list page shows, in its order.
func listed(body string) []string {
	var ids []string
	for _, m := range regexp.MustCompile(`<tr class="letter">\s*<td class="mono nowrap"><a href="[^"]*">([0-9a-f-]{36})</a>`).FindAllStringSubmatch(body, -1) {
		ids = append(ids, m[1])
	}
	return ids
}

func strs(ids ...outbox.ID) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = id.String()
	}
	return out
}

// formOf reads the confirmation form of a page: its action and fields.
func formOf(t *testing.T, body string) (action string, fields url.Values) {
	t.Helper()
	m := regexp.MustCompile(`<form method="post" action="([^"]+)"`).FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("the page has no form:\n%s", body)
	}
	fields = url.Values{}
	for _, in := range regexp.MustCompile(`<input type="hidden" name="([^"]+)" value="([^"]*)">`).FindAllStringSubmatch(body, -1) {
		fields.Set(in[1], in[2])
	}
	return strings.ReplaceAll(m[1], "&amp;", "&"), fields
}

func TestNewHandler_RefusesOptionsItCannotRunWith(t *testing.T) {
	out, _ := memory.NewOutboxStore(memory.OutboxStoreOptions{})
	leases, _ := memory.NewLeaseStore(memory.LeaseStoreOptions{})
	for field, opts := range map[string]Options{
		"Outbox":    {CSRFKey: testKey},
		"CSRFKey":   {Outbox: out},
		"CSRFKey ":  {Outbox: out, CSRFKey: testKey[:MinCSRFKeyLength-1]},
		"TokenTTL":  {Outbox: out, CSRFKey: testKey, TokenTTL: -time.Second},
		"TokenTTL ": {Outbox: out, CSRFKey: testKey, TokenTTL: MaxTokenTTL + time.Second},
		"PageSize":  {Outbox: out, CSRFKey: testKey, PageSize: outbox.MaxListLimit + 1},
		"Prefix":    {Outbox: out, CSRFKey: testKey, Prefix: "/ops/"},
		"Prefix ":   {Outbox: out, CSRFKey: testKey, Prefix: "ops"},
		"Prefix  ":  {Outbox: out, CSRFKey: testKey, Prefix: `/o"ps`},
		"Leases":    {Outbox: out, CSRFKey: testKey, Leases: struct{ lease.Store }{leases}},
	} {
		_, err := NewHandler(opts)
		var fe *config.FieldError
		if !errors.Is(err, ErrInvalidOptions) || !errors.As(err, &fe) || fe.Field != "console.Options."+strings.TrimSpace(field) {
			t.Errorf("%s: err = %v, want an ErrInvalidOptions naming console.Options.%s", field, err, strings.TrimSpace(field))
		}
	}
	if _, err := NewHandler(Options{Outbox: out, CSRFKey: testKey}); err != nil {
		t.Errorf("the least options: %v", err)
	}
}

func TestOverview_ShowsTheOutboxsHealthBacklogDriverAndLeases(t *testing.T) {
	driver := health.ReporterFunc(func() health.Status {
		return health.Status{Running: true, Roles: []health.Role{{Name: outbox.DefaultLeaderLockName, State: health.Leader, Token: 7}}}
	})
	f := newFixture(t, func(o *Options) { o.Driver = driver })
	ctx := context.Background()
	f.park("graph.metadata", `{}`, "no processor for lane graph.metadata")
	f.park("graph.metadata", `{}`, "no processor for lane graph.metadata")
	for range 3 {
		f.enqueue("graph.init")
	}
	stuck := time.Date(2026, 5, 1, 8, 0, 0, 0, time.UTC)
	st, _ := f.out.State(ctx)
	from, _ := outbox.CursorFromState(st)
	str := func(s string) *string { return &s }
	if err := f.out.Settle(ctx, outbox.Settlement{From: from, To: from, State: map[string]*string{
		outbox.KeyFirstStuckAt:   str(stuck.Format(time.RFC3339Nano)),
		outbox.KeyFailedAttempts: str("4"),
		outbox.KeyLastError:      str("lane graph.init: 503 Service Unavailable"),
		outbox.KeyLastErrorAt:    str(stuck.Add(time.Minute).Format(time.RFC3339Nano)),
		outbox.KeyLastScanAt:     str(stuck.Add(time.Minute).Format(time.RFC3339Nano)),
	}}); err != nil {
		t.Fatal(err)
	}
	var claims []lease.Claim
	for _, r := range []string{"devices:partition-10", "coordinator", "devices:partition-2", "devices:partition-1"} {
		claims = append(claims, lease.Claim{Role: r})
	}
	recs, err := f.leases.Heartbeat(ctx, lease.HeartbeatRequest{Holder: "node-a", Address: "http://10.0.0.1:8080", LeaseDuration: time.Minute, Claims: claims})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if r.Role == "devices:partition-2" {
			if ok, err := f.leases.Release(ctx, r.Role, "node-a", r.Token); err != nil || !ok {
				t.Fatalf("release: %v %v", ok, err)
			}
		}
	}

	body := f.page(prefix + "/")
	for _, want := range []string{
		`<span class="good">leader</span> of <code>baton-outbox-driver</code> (fencing token 7)`,
		`failing since 2026-05-01 08:00:00 UTC</span>, 4 passes`,
		`lane graph.init: 503 Service Unavailable`, `at 2026-05-01 08:01:00 UTC</div>`,
		`<td id="pending"><span class="big">3</span>`,
		`<td id="dead-waiting"><span class="big warn">2</span>`,
		`<code>coordinator</code></td><td>node-a</td><td class="mono">http://10.0.0.1:8080</td><td class="mono">1</td><td class="good">held, `,
		`<code>devices</code> <span class="muted">2 of 3 held</span></h3>`,
		`<td class="muted">free, ended `,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("the overview lacks %q:\n%s", want, body)
		}
	}
	if strings.Contains(body, "from an earlier failing streak") {
		t.Error("the overview calls a current streak's error history")
	}
	// Partitions in the order a person reads them.
	i1, i2, i10 := strings.Index(body, "<tr><td>1</td>"), strings.Index(body, "<tr><td>2</td>"), strings.Index(body, "<tr><td>10</td>")
	if i1 < 0 || i1 > i2 || i2 > i10 {
		t.Errorf("partitions out of order (%d, %d, %d):\n%s", i1, i2, i10, body)
	}

	// Once a pass succeeds, the error is history.
	st, _ = f.out.State(ctx)
	from, _ = outbox.CursorFromState(st)
	if err := f.out.Settle(ctx, outbox.Settlement{From: from, To: from, State: map[string]*string{
		outbox.KeyFirstStuckAt: nil, outbox.KeyFailedAttempts: nil,
	}}); err != nil {
		t.Fatal(err)
	}
	body = f.page(prefix + "/")
	for _, want := range []string{`<span class="good">not failing</span>`, "from an earlier failing streak"} {
		if !strings.Contains(body, want) {
			t.Errorf("the overview after the streak lacks %q:\n%s", want, body)
		}
	}
}

func TestOverview_WithoutDriverLeasesOrCounterSaysSo(t *testing.T) {
	f := newFixture(t, func(o *Options) { o.Leases = nil; o.Outbox = uncounted{o.Outbox} })
	body := f.page(prefix + "/")
	for _, want := range []string{"not reported to this console", "no pass has settled yet", "this store does not count them"} {
		if !strings.Contains(body, want) {
			t.Errorf("the overview lacks %q:\n%s", want, body)
		}
	}
	if strings.Contains(body, `id="leases"`) {
		t.Error("the overview shows leases it was given no store for")
	}
}

// uncounted hides a store's Counter.
type uncounted struct{ outbox.Store }

func TestDeadList_FiltersByLaneAndState(t *testing.T) {
	f := newFixture(t, nil)
	a1 := f.park("graph.metadata", `{}`, "409")
	b := f.park("graph.init", `{}`, "409")
	a2 := f.park("graph.metadata", `{}`, "409")
	if err := f.out.Requeue(context.Background(), a1, outbox.NewID()); err != nil {
		t.Fatal(err)
	}
	for query, want := range map[string][]string{
		"":                                   strs(a2, b, a1),
		"?lane=graph.metadata":               strs(a2, a1),
		"?lane=graph.metadata&state=waiting": strs(a2),
		"?state=requeued":                    strs(a1),
		"?state=waiting":                     strs(a2, b),
		"?lane=graph.none":                   nil,
	} {
		if got := listed(f.page(prefix + "/dead" + query)); !slices.Equal(got, want) {
			t.Errorf("/dead%s listed %v, want %v", query, got, want)
		}
	}
	body := f.page(prefix + "/dead?lane=graph.metadata&state=waiting")
	for _, want := range []string{`value="graph.metadata"`, `<option value="waiting" selected>`,
		`href="/ops/requeue/confirm?lane=graph.metadata"`} {
		if !strings.Contains(body, want) {
			t.Errorf("the filtered list lacks %q", want)
		}
	}
	if strings.Contains(f.page(prefix+"/dead?state=requeued"), `id="bulk"`) {
		t.Error("the list of requeued dead letters offers to requeue them")
	}
	for _, q := range []string{"?state=parked", "?limit=0", "?before=nope"} {
		if r := f.get(prefix + "/dead" + q); r.code != http.StatusBadRequest {
			t.Errorf("/dead%s: %d, want 400", q, r.code)
		}
	}
}

func TestDeadList_PagesThroughEveryDeadLetterOnce(t *testing.T) {
	f := newFixture(t, func(o *Options) { o.PageSize = 2 })
	var parked []outbox.ID
	for range 5 {
		parked = append(parked, f.park("graph.metadata", `{}`, "409"))
	}
	slices.Reverse(parked) // newest first
	var seen []string
	path := prefix + "/dead?lane=graph.metadata"
	for pages := 0; path != ""; pages++ {
		if pages > 3 {
			t.Fatal("the pages do not end")
		}
		body := f.page(path)
		ids := listed(body)
		if len(ids) == 0 || len(ids) > 2 {
			t.Fatalf("%s listed %v", path, ids)
		}
		seen = append(seen, ids...)
		path = ""
		if m := regexp.MustCompile(`<a href="([^"]+)" id="next">`).FindStringSubmatch(body); m != nil {
			path = strings.ReplaceAll(m[1], "&amp;", "&")
			if !strings.Contains(path, "lane=graph.metadata") || !strings.Contains(path, "before="+ids[len(ids)-1]) {
				t.Errorf("the next page's link %q loses the filter or the place", path)
			}
		}
	}
	if !slices.Equal(seen, strs(parked...)) {
		t.Errorf("the pages listed %v, want %v", seen, strs(parked...))
	}
}

func TestLetter_ShowsOneDeadLetterWithItsPayload(t *testing.T) {
	f := newFixture(t, nil)
	id := f.park("graph.metadata", `{"resourceId":"p1","n":2}`, "409 conflict")
	body := f.page(prefix + "/dead/" + id.String())
	for _, want := range []string{
		"(25 bytes)", "{\n  &#34;resourceId&#34;: &#34;p1&#34;,\n  &#34;n&#34;: 2\n}", "409 conflict",
		"waiting for an operator", `href="/ops/dead/` + id.String() + `/confirm"`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("the dead letter's page lacks %q:\n%s", want, body)
		}
	}
	if strings.Contains(f.page(prefix+"/dead"), "resourceId") {
		t.Error("the list shows payloads")
	}
	if r := f.get(prefix + "/dead/" + outbox.NewID().String()); r.code != http.StatusNotFound || !strings.Contains(r.body, "no such dead letter") {
		t.Errorf("an unknown dead letter: %d\n%s", r.code, r.body)
	}
	if r := f.get(prefix + "/dead/not-an-id"); r.code != http.StatusBadRequest {
		t.Errorf("a bad id: %d", r.code)
	}
}

func TestRequeueOne_ConfirmsThenRequeues(t *testing.T) {
	f := newFixture(t, nil)
	id := f.park("graph.metadata", `{}`, "409")
	body := f.page(prefix + "/dead/" + id.String() + "/confirm")
	if !strings.Contains(body, "This will requeue <b>1 dead letter</b>") {
		t.Errorf("the confirmation does not say how many:\n%s", body)
	}
	if !f.dead(id).RequeuedAs.IsNil() {
		t.Fatal("showing the confirmation requeued")
	}
	action, fields := formOf(t, body)
	if action != prefix+"/dead/"+id.String()+"/requeue" || fields.Get(csrfField) == "" {
		t.Fatalf("form: %s %v", action, fields)
	}
	r := f.do(http.MethodPost, action, fields, nil)
	if r.code != http.StatusSeeOther || r.hdr.Get("Location") != prefix+"/dead/"+id.String()+"?requeued=1" {
		t.Fatalf("POST: %d %q\n%s", r.code, r.hdr.Get("Location"), r.body)
	}
	d := f.dead(id)
	if d.RequeuedAs.IsNil() {
		t.Fatal("the dead letter was not requeued")
	}
	entries, _ := f.out.Scan(context.Background(), outbox.Cursor{}, 100)
	if last := entries[len(entries)-1]; last.ID != d.RequeuedAs || last.Lane != "graph.metadata" {
		t.Errorf("the requeued entry is not at the end of the order: %+v", entries)
	}
	if body := f.page(prefix + "/dead/" + id.String() + "?requeued=1"); !strings.Contains(body, "Requeued as <span class=\"mono\">"+d.RequeuedAs.String()) {
		t.Errorf("the page after the requeue does not say so:\n%s", body)
	}
	// Confirming it again says it is done; posting the old form again is
	// refused by the store.
	if body := f.page(prefix + "/dead/" + id.String() + "/confirm"); !strings.Contains(body, "requeued already") || strings.Contains(body, "<form method=\"post\"") {
		t.Errorf("a second confirmation offers a form:\n%s", body)
	}
	if r := f.do(http.MethodPost, action, fields, nil); r.code != http.StatusConflict {
		t.Errorf("a second POST: %d, want 409", r.code)
	}
}

func TestRequeueBulk_ConfirmsWithADryRunCountAndRequeuesAtMostThat(t *testing.T) {
	f := newFixture(t, nil)
	var lane []outbox.ID
	for range 3 {
		lane = append(lane, f.park("graph.metadata", `{}`, "no processor"))
	}
	other := f.park("graph.init", `{}`, "no processor")
	body := f.page(prefix + "/requeue/confirm?lane=graph.metadata")
	if !strings.Contains(body, "This will requeue <b>3 dead letters</b>: the waiting ones of lane <code>graph.metadata</code>") {
		t.Fatalf("the confirmation does not count:\n%s", body)
	}
	for _, id := range append(slices.Clone(lane), other) {
		if !f.dead(id).RequeuedAs.IsNil() {
			t.Fatal("the confirmation's count requeued")
		}
	}
	action, fields := formOf(t, body)
	if action != prefix+"/requeue" || fields.Get("limit") != "3" || fields.Get("lane") != "graph.metadata" {
		t.Fatalf("form: %s %v", action, fields)
	}
	late := f.park("graph.metadata", `{}`, "no processor") // parked after the confirmation
	r := f.do(http.MethodPost, action, fields, nil)
	loc, _ := url.Parse(r.hdr.Get("Location"))
	if r.code != http.StatusSeeOther || loc.Path != prefix+"/dead" || loc.Query().Get("requeued") != "3" || loc.Query().Get("lane") != "graph.metadata" {
		t.Fatalf("POST: %d %q\n%s", r.code, r.hdr.Get("Location"), r.body)
	}
	for _, id := range lane {
		if f.dead(id).RequeuedAs.IsNil() {
			t.Errorf("%s was not requeued", id)
		}
	}
	if !f.dead(late).RequeuedAs.IsNil() || !f.dead(other).RequeuedAs.IsNil() {
		t.Error("the bulk requeue took a dead letter it did not confirm")
	}
	if body := f.page(loc.String()); !strings.Contains(body, "Requeued 3 dead letters") || !slices.Equal(listed(body), strs(lane[2], lane[1], lane[0])) {
		t.Errorf("the page after the bulk requeue:\n%s", body)
	}
	// Every lane, and a lane with nothing waiting.
	body = f.page(prefix + "/requeue/confirm")
	if !strings.Contains(body, "This will requeue <b>2 dead letters</b>: the waiting ones of every lane") {
		t.Errorf("every lane's confirmation:\n%s", body)
	}
	if body := f.page(prefix + "/requeue/confirm?lane=graph.none"); !strings.Contains(body, "nothing to requeue") || strings.Contains(body, "<form method=\"post\"") {
		t.Errorf("an empty lane's confirmation offers a form:\n%s", body)
	}
}

func TestPosts_WithoutAValidTokenAreRefusedAndChangeNothing(t *testing.T) {
	f := newFixture(t, nil)
	id := f.park("graph.metadata", `{}`, "409")
	one := "/dead/" + id.String() + "/requeue"
	other := "/dead/" + outbox.NewID().String() + "/requeue"
	now := time.Now()
	for name, tc := range map[string]struct {
		action string
		token  string
	}{
		"missing (one)":           {one, ""},
		"missing (bulk)":          {"/requeue", ""},
		"forged":                  {one, "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"},
		"not base64":              {"/requeue", "!!"},
		"another action's":        {one, f.h.csrf.issue(other, now)},
		"the single requeue's":    {"/requeue", f.h.csrf.issue(one, now)},
		"expired (one)":           {one, f.h.csrf.issue(one, now.Add(-DefaultTokenTTL-time.Second))},
		"expired (bulk)":          {"/requeue", f.h.csrf.issue("/requeue", now.Add(-DefaultTokenTTL-time.Second))},
		"signed with another key": {one, signer{key: []byte("another key of thirty-two bytes!"), ttl: time.Hour}.issue(one, now)},
	} {
		form := url.Values{csrfField: {tc.token}, "lane": {"graph.metadata"}, "limit": {"5"}}
		if tc.token == "" {
			form.Del(csrfField)
		}
		r := f.do(http.MethodPost, prefix+tc.action, form, nil)
		if r.code != http.StatusForbidden || !strings.Contains(r.body, "nothing was changed") {
			t.Errorf("%s: %d, want 403\n%s", name, r.code, r.body)
		}
	}
	if !f.dead(id).RequeuedAs.IsNil() {
		t.Fatal("a refused POST requeued the dead letter")
	}
	// A valid token that a page of another site makes the browser send is
	// refused too.
	form := url.Values{csrfField: {f.h.csrf.issue(one, now)}}
	r := f.do(http.MethodPost, prefix+one, form, http.Header{"Sec-Fetch-Site": {"cross-site"}, "Origin": {"https://evil.example"}})
	if r.code != http.StatusForbidden || !f.dead(id).RequeuedAs.IsNil() {
		t.Errorf("a cross-site POST with a token: %d", r.code)
	}
	// And the same form from the console itself goes through.
	if r := f.do(http.MethodPost, prefix+one, form, nil); r.code != http.StatusSeeOther || f.dead(id).RequeuedAs.IsNil() {
		t.Errorf("the valid form: %d\n%s", r.code, r.body)
	}
}

func TestToken_ServesItsActionUntilItExpires(t *testing.T) {
	s := signer{key: testKey, ttl: time.Minute}
	now := time.Now()
	tok := s.issue("/requeue", now)
	if err := s.check(tok, "/requeue", now.Add(59*time.Second)); err != nil {
		t.Errorf("within its life: %v", err)
	}
	if err := s.check(tok, "/requeue", now.Add(61*time.Second)); !errors.Is(err, errExpiredToken) {
		t.Errorf("past its life: %v", err)
	}
	if err := s.check(tok, "/dead/x/requeue", now); !errors.Is(err, errBadToken) {
		t.Errorf("for another action: %v", err)
	}
	// A token whose expiry was moved forward no longer matches its MAC.
	b := []byte(tok)
	b[5] ^= 1
	if err := s.check(string(b), "/requeue", now); !errors.Is(err, errBadToken) {
		t.Errorf("tampered: %v", err)
	}
}

func TestMutatingRoutes_RefuseGET(t *testing.T) {
	f := newFixture(t, nil)
	id := f.park("graph.metadata", `{}`, "409")
	for _, path := range []string{"/dead/" + id.String() + "/requeue", "/requeue"} {
		r := f.get(prefix + path)
		if r.code != http.StatusMethodNotAllowed || !strings.Contains(r.hdr.Get("Allow"), "POST") {
			t.Errorf("GET %s: %d (Allow %q), want 405", path, r.code, r.hdr.Get("Allow"))
		}
	}
	if !f.dead(id).RequeuedAs.IsNil() {
		t.Fatal("a GET requeued")
	}
}

func TestPages_ShowScriptsInPayloadsAndErrorsAsText(t *testing.T) {
	f := newFixture(t, nil)
	const payload = `{"name":"<script>window.pwned=1</script>"}`
	const reason = `<script>document.title='pwned'</script><img src=x onerror=alert(1)>`
	id := f.park("graph.metadata", payload, reason)
	for _, path := range []string{"/dead", "/dead/" + id.String(), "/dead/" + id.String() + "/confirm"} {
		r := f.get(prefix + path)
		if r.code != http.StatusOK {
			t.Fatalf("%s: %d", path, r.code)
		}
		if strings.Contains(strings.ToLower(r.body), "<script") || strings.Contains(r.body, "<img") {
			t.Errorf("%s shows markup of the dead letter's:\n%s", path, r.body)
		}
		if !strings.Contains(r.body, "&lt;script&gt;document.title=&#39;pwned&#39;&lt;/script&gt;&lt;img src=x onerror=alert(1)&gt;") {
			t.Errorf("%s does not show the reason as text:\n%s", path, r.body)
		}
		if csp := r.hdr.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") || !strings.Contains(csp, "frame-ancestors 'none'") {
			t.Errorf("%s: Content-Security-Policy %q", path, csp)
		}
	}
	if body := f.page(prefix + "/dead/" + id.String()); !strings.Contains(body, "&lt;script&gt;window.pwned=1&lt;/script&gt;") {
		t.Errorf("the payload is not shown as text:\n%s", body)
	}
}

func TestAPI_TheJSONRoutesServeScriptsAndRefuseForms(t *testing.T) {
	f := newFixture(t, nil)
	id := f.park("graph.metadata", `{}`, "409")
	r := f.get(prefix + "/api/outbox/dead?lane=graph.metadata")
	if r.code != http.StatusOK || !strings.Contains(r.body, id.String()) || r.hdr.Get("Content-Type") != "application/json" {
		t.Fatalf("GET api/outbox/dead: %d %s", r.code, r.body)
	}
	// An HTML form cannot use it, even with a token of the console's.
	form := url.Values{csrfField: {f.h.csrf.issue("/dead/"+id.String()+"/requeue", time.Now())}}
	if r := f.do(http.MethodPost, prefix+"/api/outbox/dead/"+id.String()+"/requeue", form, nil); r.code != http.StatusUnsupportedMediaType {
		t.Errorf("a form POST to the API: %d, want 415", r.code)
	}
	if !f.dead(id).RequeuedAs.IsNil() {
		t.Fatal("a form requeued through the API")
	}
	r = f.do(http.MethodPost, prefix+"/api/outbox/dead/requeue", nil, http.Header{"Content-Type": {"application/json"}})
	if r.code != http.StatusOK || !strings.Contains(r.body, `"requeued":1`) || f.dead(id).RequeuedAs.IsNil() {
		t.Errorf("a JSON bulk requeue: %d %s", r.code, r.body)
	}
}

func TestOverview_CountsNoPendingEntriesForAnOutboxReadFromTheLog(t *testing.T) {
	// The stored cursor of an outbox read from the log no longer moves:
	// counting above it would show every entry since the switch as
	// undelivered.
	f := newFixture(t, nil)
	ctx := context.Background()
	f.park("graph.metadata", `{}`, "no processor for lane graph.metadata")
	for range 3 {
		f.enqueue("graph.init")
	}
	st, _ := f.out.State(ctx)
	from, _ := outbox.CursorFromState(st)
	logical := outbox.SourceLogical
	if err := f.out.Settle(ctx, outbox.Settlement{From: from, To: from, State: map[string]*string{outbox.KeySource: &logical}}); err != nil {
		t.Fatal(err)
	}
	body := f.page(prefix + "/")
	if !strings.Contains(body, `<td id="pending"><span class="muted">read from the log`) {
		t.Errorf("the overview of an outbox read from the log counts pending entries:\n%s", body)
	}
	if !strings.Contains(body, `<td id="dead-waiting"><span class="big warn">1</span>`) {
		t.Errorf("the overview lost the dead letters waiting:\n%s", body)
	}
}
