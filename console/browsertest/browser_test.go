package browsertest

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/baton-go/baton/backends/pgxstore"
	"github.com/baton-go/baton/console"
	"github.com/baton-go/baton/core/health"
	"github.com/baton-go/baton/core/lease"
	"github.com/baton-go/baton/core/outbox"
	"github.com/baton-go/baton/internal/testenv"
	lockmem "github.com/baton-go/baton/locks/memory"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// Environment variables of the test.
const (
	// EnvChromium is the browser to drive, when it is not on PATH.
	EnvChromium = "BATON_CHROMIUM"
	// EnvScreenshotDir is where the screenshots go.
	EnvScreenshotDir = "BATON_SCREENSHOT_DIR"
)

// chromium finds the browser, or skips the test (fails it when CI is set,
// where a missing browser is a broken setup, not a lighter machine).
func chromium(t *testing.T) string {
	t.Helper()
	if p := os.Getenv(EnvChromium); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	msg := "no Chromium on PATH (chromium, chromium-browser, google-chrome) and " + EnvChromium + " unset: apt-get install -y chromium"
	if os.Getenv("CI") != "" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// screenshotDir is where the test leaves its screenshots: outside the
// source tree, kept after the test.
func screenshotDir(t *testing.T) string {
	t.Helper()
	dir := os.Getenv(EnvScreenshotDir)
	if dir == "" {
		dir = filepath.Join(os.TempDir(), "baton-console-screenshots")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

const (
	brokenLane = "graph.metadata" // shipped before its processor could take it
	otherLane  = "graph.init"
	leaderLock = "baton-outbox-driver"
)

// destination is a lane's processor: it parks every entry until ready,
// as a destination that does not know the new entries yet would refuse
// them, and delivers once it is.
type destination struct {
	mu        sync.Mutex
	ready     bool
	delivered map[outbox.ID]bool
}

func (d *destination) setReady() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.ready = true
}

func (d *destination) deliver(_ context.Context, run []outbox.Entry) ([]outbox.Outcome, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]outbox.Outcome, len(run))
	for i, e := range run {
		if !d.ready {
			// The destination's answer echoes the body, as many do.
			out[i] = outbox.Park("422 Unprocessable Entity: no handler for " + e.Lane + " yet; body " + string(e.Payload))
			continue
		}
		d.delivered[e.ID] = true
		out[i] = outbox.Delivered()
	}
	return out, nil
}

func (d *destination) hasDelivered(ids ...outbox.ID) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, id := range ids {
		if !d.delivered[id] {
			return false
		}
	}
	return true
}

// eventually waits for cond, which the driver or the store makes true in
// its own time, failing the test if it never does.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting: %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func produce(t *testing.T, pool *pgxpool.Pool, lane, payload string) outbox.ID {
	t.Helper()
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	id := outbox.NewID()
	if err := pgxstore.Enqueue(ctx, tx, id, lane, []byte(payload)); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	return id
}

// scene is the incident: a producer of brokenLane shipped before its
// destination could take the entries, a real driver parking them, the
// console over the same database.
type scene struct {
	store   *pgxstore.OutboxStore
	dest    *destination
	driver  *outbox.Driver
	notices chan outbox.Notice
	srv     *httptest.Server
	base    string // the console's address
	broken  []outbox.ID
	script  outbox.ID // a dead letter whose payload and reason hold a script
	other   outbox.ID // a dead letter of otherLane
}

// The script a payload carries, and that must never run: it would set
// window.pwned and the page's title.
const script = `<script>window.pwned=1;document.title='pwned'</script>`

func newScene(t *testing.T) *scene {
	t.Helper()
	ctx := context.Background()
	env := testenv.Postgres(t)
	if err := pgxstore.Migrate(ctx, env.Pool, pgxstore.MigrateOptions{}); err != nil {
		t.Fatal(err)
	}
	store, err := pgxstore.NewOutboxStore(env.Pool, pgxstore.OutboxStoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	leases, err := pgxstore.NewLeaseStore(env.Pool, pgxstore.LeaseStoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	locks, err := lockmem.NewProvider(lockmem.Options{})
	if err != nil {
		t.Fatal(err)
	}
	s := &scene{store: store, dest: &destination{delivered: map[outbox.ID]bool{}}, notices: make(chan outbox.Notice, 16)}
	other := &destination{delivered: map[outbox.ID]bool{}}
	s.driver, err = outbox.NewDriver(outbox.Config{
		Store: store, Locks: locks, LeaderLockName: leaderLock,
		Processors: []outbox.Processor{
			outbox.ProcessorFunc{LaneName: brokenLane, Func: s.dest.deliver},
			outbox.ProcessorFunc{LaneName: otherLane, Func: other.deliver},
		},
		Notify: func(_ context.Context, n outbox.Notice) error {
			select {
			case s.notices <- n:
			default:
			}
			return nil
		},
		IdleDelay: 200 * time.Millisecond, ErrorDelay: 200 * time.Millisecond, RetentionDisabled: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.driver.Run(runCtx) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("driver: %v", err)
		}
	})

	// Leases: a coordinator and a partition set, one partition free.
	var claims []lease.Claim
	claims = append(claims, lease.Claim{Role: "coordinator"})
	for i := range 4 {
		claims = append(claims, lease.Claim{Role: lease.PartitionRole("devices", i)})
	}
	recs, err := leases.Heartbeat(ctx, lease.HeartbeatRequest{Holder: "node-a", Address: "http://10.0.0.1:8080", LeaseDuration: 10 * time.Minute, Claims: claims[:3]})
	if err != nil {
		t.Fatal(err)
	}
	more, err := leases.Heartbeat(ctx, lease.HeartbeatRequest{Holder: "node-b", Address: "http://10.0.0.2:8080", LeaseDuration: 10 * time.Minute, Claims: claims[3:]})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range append(recs, more...) {
		if r.Role == lease.PartitionRole("devices", 3) {
			if ok, err := leases.Release(ctx, r.Role, r.Holder, r.Token); err != nil || !ok {
				t.Fatalf("release: %v %v", ok, err)
			}
		}
	}

	key := make([]byte, console.MinCSRFKeyLength)
	if _, err := rand.Read(key); err != nil {
		t.Fatal(err)
	}
	h, err := console.NewHandler(console.Options{Outbox: store, Leases: leases, Driver: s.driver, CSRFKey: key, Prefix: "/ops"})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/ops/", h)
	s.srv = httptest.NewServer(mux)
	t.Cleanup(s.srv.Close)
	s.base = s.srv.URL + "/ops"

	eventually(t, "the driver leads", func() bool {
		st := s.driver.Status()
		return len(st.Roles) == 1 && st.Roles[0].State == health.Leader
	})
	// The incident: the producer ships, every entry of its lane is parked.
	for i := range 3 {
		s.broken = append(s.broken, produce(t, env.Pool, brokenLane, fmt.Sprintf(`{"resourceId":"r-%d","schema":2}`, i)))
	}
	s.script = produce(t, env.Pool, brokenLane, `{"resourceId":"r-x","name":"`+script+`"}`)
	s.other = produce(t, env.Pool, otherLane, `{"resourceId":"r-y"}`)
	select {
	case n := <-s.notices:
		if n.Kind != outbox.NoticeDeadLetter || n.Lane != brokenLane {
			t.Fatalf("the first notice is %+v, want a dead-letter notice of %s", n, brokenLane)
		}
	case <-time.After(time.Minute):
		t.Fatal("no dead-letter notice")
	}
	eventually(t, "five dead letters", func() bool {
		n, err := store.CountDead(ctx, 100)
		return err == nil && n == 5
	})
	return s
}

func (s *scene) requeuedAs(t *testing.T, id outbox.ID) outbox.ID {
	t.Helper()
	d, err := s.store.GetDead(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return d.RequeuedAs
}

// inert is a check, in the page, that no script of a payload ran.
const inert = `typeof window.pwned === "undefined" && !document.title.includes("pwned")`

// browser drives one tab of a headless Chromium; every step fails the
// test on an error.
type browser struct {
	t   *testing.T
	ctx context.Context
}

func newBrowser(t *testing.T, path string) *browser {
	t.Helper()
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.WindowSize(1280, 900))...)
	t.Cleanup(cancelAlloc)
	ctx, cancel := chromedp.NewContext(alloc)
	t.Cleanup(cancel)
	// The first call starts the browser, which lives as long as its
	// context: no timeout on that one.
	if err := chromedp.Do(ctx, chromedp.Navigate("about:blank")); err != nil {
		t.Fatalf("start %s: %v", path, err)
	}
	return &browser{t: t, ctx: ctx}
}

func run[T any](b *browser, what string, a chromedp.Action[T]) T {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, time.Minute)
	defer cancel()
	v, err := chromedp.Run(ctx, a)
	if err != nil {
		b.t.Fatalf("%s: %v", what, err)
	}
	return v
}

func (b *browser) do(what string, steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	run(b, what, chromedp.Steps(steps...))
}

func (b *browser) text(id string) string {
	b.t.Helper()
	return run(b, "read #"+id, chromedp.Text(chromedp.ID(id)))
}

func (b *browser) count(css string) int {
	b.t.Helper()
	return run(b, "count "+css, chromedp.Evaluate[int](fmt.Sprintf("document.querySelectorAll(%q).length", css)))
}

// inert fails the test if a script of a payload ran on the page.
func (b *browser) inert(where string) {
	b.t.Helper()
	if !run(b, "check that no script ran on "+where, chromedp.Evaluate[bool](`typeof window.pwned === "undefined" && !document.title.includes("pwned")`)) {
		b.t.Fatalf("a payload's script ran on %s", where)
	}
}

func (b *browser) screenshot(dir, name string) {
	b.t.Helper()
	png := run(b, "screenshot "+name, chromedp.FullScreenshot(100))
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, png, 0o644); err != nil {
		b.t.Fatal(err)
	}
	b.t.Logf("screenshot: %s", p)
}

func TestConsole_InABrowser_RepairsAParkedLane(t *testing.T) {
	path := chromium(t)
	s := newScene(t)
	shots := screenshotDir(t)
	b := newBrowser(t, path)

	// The overview shows the incident.
	b.do("open the overview", chromedp.Navigate(s.base+"/"), chromedp.WaitVisible(chromedp.ID("health")))
	parts := b.text("partitions")
	for _, c := range []struct{ got, want string }{
		{b.text("driver"), "leader of " + leaderLock}, {b.text("dead-waiting"), "5"}, {b.text("streak"), "not failing"},
		{parts, "3 of 4 held"}, {parts, "free, ended"}, {b.text("leases"), "coordinator"},
	} {
		if !strings.Contains(c.got, c.want) {
			t.Errorf("the overview shows %q, want %q in it", c.got, c.want)
		}
	}
	b.screenshot(shots, "console-overview.png")

	// The list, filtered through its form to the lane's waiting dead
	// letters.
	b.do("filter the dead letters", chromedp.Navigate(s.base+"/dead"), chromedp.WaitVisible(chromedp.ID("dead-letters")),
		chromedp.SetValue(chromedp.CSS(`input[name="lane"]`), brokenLane), chromedp.SetValue(chromedp.CSS(`select[name="state"]`), "waiting"),
		chromedp.Click(chromedp.ID("filter")), chromedp.WaitReady(chromedp.CSS(`select[name="state"] option[value="waiting"][selected]`)))
	loc := run(b, "read the location", chromedp.Location())
	if u, err := url.Parse(loc); err != nil || u.Query().Get("lane") != brokenLane || u.Query().Get("state") != "waiting" {
		t.Errorf("the filter went to %s", loc)
	}
	if rows := b.count("#dead-letters tr.letter"); rows != 4 {
		t.Errorf("the filtered list has %d rows, want the lane's 4, not the other lane's", rows)
	}
	if list := b.text("dead-letters"); !strings.Contains(list, script) || strings.Contains(list, s.other.String()) {
		t.Errorf("the list shows %q; want the script as text, and not the other lane's dead letter", list)
	}
	b.inert("the list")
	b.screenshot(shots, "console-dead-letters.png")

	// One dead letter, with its payload; requeued once the destination
	// takes the lane.
	b.do("open the dead letter with a script", chromedp.Click(chromedp.CSS(fmt.Sprintf(`a[href="/ops/dead/%s"]`, s.script))),
		chromedp.WaitVisible(chromedp.ID("payload")))
	if payload := b.text("payload"); !strings.Contains(payload, script) {
		t.Errorf("the payload shows %q, want the script as text", payload)
	}
	b.inert("the dead letter's page")
	s.dest.setReady()
	b.do("confirm the single requeue", chromedp.Click(chromedp.ID("requeue")), chromedp.WaitVisible(chromedp.ID("confirm-count")))
	if confirm := b.text("confirm-count"); !strings.Contains(confirm, "This will requeue 1 dead letter.") {
		t.Errorf("the confirmation says %q", confirm)
	}
	if !s.requeuedAs(t, s.script).IsNil() {
		t.Fatal("the confirmation page requeued")
	}
	b.do("requeue it", chromedp.Click(chromedp.ID("confirm")), chromedp.WaitVisible(chromedp.ID("notice")))
	newScript := s.requeuedAs(t, s.script)
	if notice := b.text("notice"); newScript.IsNil() || !strings.Contains(notice, newScript.String()) {
		t.Fatalf("after the requeue the page says %q; the dead letter was requeued as %s", notice, newScript)
	}
	eventually(t, "the driver delivers the requeued entry", func() bool { return s.dest.hasDelivered(newScript) })
	b.inert("the page after the requeue")

	// The bulk requeue: its confirmation counts the rest; its form without
	// the token, or with a forged one, changes nothing.
	b.do("confirm the bulk requeue", chromedp.Navigate(s.base+"/dead?lane="+brokenLane+"&state=waiting"),
		chromedp.Click(chromedp.ID("bulk")), chromedp.WaitVisible(chromedp.ID("confirm-count")))
	if confirm := b.text("confirm-count"); !strings.Contains(confirm, "This will requeue 3 dead letters: the waiting ones of lane "+brokenLane) {
		t.Errorf("the bulk confirmation says %q", confirm)
	}
	bulkURL := run(b, "read the location", chromedp.Location())
	for name, tamper := range map[string]string{
		"without its token":   `document.querySelector('input[name="csrf"]').remove(); true`,
		"with a forged token": `(i => { i.value = (i.value[0] === "A" ? "B" : "A") + i.value.slice(1); return true })(document.querySelector('input[name="csrf"]'))`,
	} {
		b.do("open the form", chromedp.Navigate(bulkURL), chromedp.WaitVisible(chromedp.ID("confirm")))
		run(b, "change the form", chromedp.Evaluate[bool](tamper))
		b.do("post the form "+name, chromedp.Click(chromedp.ID("confirm")), chromedp.WaitVisible(chromedp.ID("error")))
		if refusal := run(b, "read the page", chromedp.Text(chromedp.CSS("main"))); !strings.Contains(refusal, "403 Forbidden") || !strings.Contains(refusal, "nothing was changed") {
			t.Errorf("the form %s: the browser shows %q, want a 403 refusal", name, refusal)
		}
		for _, id := range s.broken {
			if !s.requeuedAs(t, id).IsNil() {
				t.Fatalf("the form %s requeued %s", name, id)
			}
		}
	}
	// So does a client that posts the form without a token.
	resp, err := http.PostForm(s.base+"/requeue", url.Values{"lane": {brokenLane}, "limit": {"3"}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("a POST without a token: %d, want 403", resp.StatusCode)
	}

	b.do("requeue the lane", chromedp.Navigate(bulkURL), chromedp.WaitVisible(chromedp.ID("confirm")),
		chromedp.Click(chromedp.ID("confirm")), chromedp.WaitVisible(chromedp.ID("notice")))
	if notice, rows := b.text("notice"), b.count("#dead-letters tr.letter"); !strings.Contains(notice, "Requeued 3 dead letters") || rows != 4 {
		t.Errorf("after the bulk requeue the page says %q and lists %d requeued dead letters of the lane, want 3 requeued and 4 listed", notice, rows)
	}
	var replayed []outbox.ID
	for _, id := range s.broken {
		as := s.requeuedAs(t, id)
		if as.IsNil() {
			t.Fatalf("%s was not requeued", id)
		}
		replayed = append(replayed, as)
	}
	eventually(t, "the driver delivers the lane's requeued entries", func() bool { return s.dest.hasDelivered(replayed...) })
	if !s.requeuedAs(t, s.other).IsNil() {
		t.Error("the lane's bulk requeue took another lane's dead letter")
	}
}
