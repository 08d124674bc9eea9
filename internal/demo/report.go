package demo

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"time"

	"github.com/baton-go/baton/core/outbox"
)

// ---- progress ----

func (d *demo) progressLoop(ctx context.Context) {
	every := 200 * time.Millisecond
	if !d.opts.Terminal.Redraw {
		every = 2 * time.Second
	}
	t := time.NewTicker(every)
	defer t.Stop()
	type sample struct {
		at time.Time
		n  int
	}
	var samples []sample
	var lastParkedCheck time.Time
	parked := 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := time.Now()
		n := len(d.engine.Deliveries())
		samples = append(samples, sample{now, n})
		window := max(time.Second, every)
		for len(samples) > 2 && now.Sub(samples[1].at) >= window {
			samples = samples[1:]
		}
		rate := 0.0
		if s := samples[0]; now.Sub(s.at) > 0 {
			rate = float64(n-s.n) / now.Sub(s.at).Seconds()
		}
		if now.Sub(lastParkedCheck) >= time.Second {
			lastParkedCheck = now
			if list, err := d.backend.Outbox().ListDead(ctx, outbox.ListOptions{Limit: outbox.MaxListLimit}); err == nil {
				parked = 0
				for _, dl := range list {
					if dl.RequeuedAs.IsNil() {
						parked++
					}
				}
			}
		}
		leader := d.board.holderOf(d.backend.LeaderLockName())
		for _, in := range d.insts {
			if in.name == leader && in.dead.Load() {
				leader += " (down)"
			}
		}
		if leader == "" {
			leader = "none"
		}
		coordinator := "none"
		for _, in := range d.alive() {
			if h := in.coord.CurrentHolder(); h != "" {
				coordinator = h
				break
			}
		}
		d.ui.progress(fmt.Sprintf("delivered %d · %.0f/s · parked %d · outbox leader %s · coordinator %s",
			n, rate, parked, leader, coordinator))
	}
}

// ---- notices ----

// noticeReceiver is the webhook the outbox's notices are posted to.
type noticeReceiver struct {
	srv  *httptest.Server
	mu   sync.Mutex
	list []outbox.Notice
}

func newNoticeReceiver() *noticeReceiver {
	r := &noticeReceiver{}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		var n outbox.Notice
		if req.Method != http.MethodPost || json.NewDecoder(req.Body).Decode(&n) != nil {
			http.Error(w, "want a POSTed notice", http.StatusBadRequest)
			return
		}
		r.mu.Lock()
		r.list = append(r.list, n)
		r.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	return r
}

func (r *noticeReceiver) url() string { return r.srv.URL + "/alerts" }

func (r *noticeReceiver) close() { r.srv.Close() }

func (r *noticeReceiver) of(kind outbox.NoticeKind) []outbox.Notice {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []outbox.Notice
	for _, n := range r.list {
		if n.Kind == kind {
			out = append(out, n)
		}
	}
	return out
}

// ---- summary ----

func (d *demo) summary() {
	r := d.res
	d.ui.textf("\nverification, computed from what the fake engine received and what the store holds\n")
	for _, c := range r.Checks {
		mark := "ok  "
		if !c.OK {
			mark = "FAIL"
		}
		d.ui.textf("  %s  %-30s %s\n", mark, c.Name, c.Detail)
	}
	if r.Duplicates > 0 {
		d.ui.textf("  at least once: %d repeated requests (after the failover); the engine acknowledged them by Idempotency-Key and applied nothing twice\n", r.Duplicates)
	}
	if r.Passed {
		d.ui.textf("PASS in %s\n", r.Duration)
	} else {
		d.ui.textf("FAIL in %s\n", r.Duration)
	}
}

// sortedKeys returns m's keys in order.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
