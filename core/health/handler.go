package health

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/baton-go/baton/core/config"
)

// DefaultStaleAfter is how long past its due time a component may go
// without reaching its store before readiness fails. It absorbs a slow
// statement or two, not an outage.
const DefaultStaleAfter = time.Minute

// ErrInvalidConfig is returned (wrapped, naming the field) by NewHandler.
var ErrInvalidConfig = errors.New("baton/health: invalid config")

// Config configures a Handler.
type Config struct {
	// Components are the reporters to judge, by name ("outbox", "leases",
	// "workrow:emails"). At least one.
	Components map[string]Reporter
	// StaleAfter is the staleness bound: a component whose next cycle was
	// due more than StaleAfter ago and has not reached its store is not
	// ready. Default DefaultStaleAfter.
	StaleAfter time.Duration
	// ShowErrors includes each component's last error in the answer. Errors
	// can name hosts and tables: leave it off where the probe port is
	// reachable by anyone but the operators.
	ShowErrors bool
}

func (c Config) withDefaults() Config {
	if c.StaleAfter == 0 {
		c.StaleAfter = DefaultStaleAfter
	}
	return c
}

func (c Config) validate() error {
	switch {
	case len(c.Components) == 0:
		return config.Invalid(ErrInvalidConfig, "Components", "is empty; a probe needs something to judge")
	case c.StaleAfter < 0:
		return config.Invalid(ErrInvalidConfig, "StaleAfter", "is %v; it must be positive", c.StaleAfter)
	}
	for name, r := range c.Components {
		switch {
		case name == "" || strings.ContainsAny(name, "\x00\n"):
			return config.Invalid(ErrInvalidConfig, "Components", "has the name %q, empty or not one line", name)
		case r == nil:
			return config.Invalid(ErrInvalidConfig, fmt.Sprintf("Components[%q]", name), "is nil")
		}
	}
	return nil
}

// Handler serves the probes. Mount it under a prefix with the prefix
// stripped:
//
//	mux.Handle("/healthz/", http.StripPrefix("/healthz", h))
//
// GET /live is liveness, GET /ready readiness, GET / the same as /ready.
// Each answers 200 when up and 503 when down, with a JSON body listing
// every component and the verdict on it.
type Handler struct {
	cfg   Config
	names []string
}

// NewHandler validates cfg and returns the handler.
func NewHandler(cfg Config) (*Handler, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	names := make([]string, 0, len(cfg.Components))
	for n := range cfg.Components {
		names = append(names, n)
	}
	slices.Sort(names)
	return &Handler{cfg: cfg, names: names}, nil
}

// Probe names.
const (
	ProbeLive  = "live"
	ProbeReady = "ready"
)

// Report is the body of a probe's answer.
type Report struct {
	Probe string `json:"probe"`
	// OK is the verdict; the status code is 200 when true, 503 when false.
	OK         bool        `json:"ok"`
	At         time.Time   `json:"at"`
	StaleAfter string      `json:"stale_after"`
	Components []Component `json:"components"`
}

// Component is one component's status and the verdicts on it.
type Component struct {
	Name string `json:"name"`
	Status
	Live  bool `json:"live"`
	Ready bool `json:"ready"`
	// Reason says why the component is not ready (or not live).
	Reason string `json:"reason,omitempty"`
}

// Check judges every component at now for the probe (ProbeLive or
// ProbeReady).
func (h *Handler) Check(probe string, now time.Time) Report {
	rep := Report{Probe: probe, OK: true, At: now.UTC(), StaleAfter: h.cfg.StaleAfter.String()}
	for _, name := range h.names {
		s := h.cfg.Components[name].Status()
		if !h.cfg.ShowErrors {
			s.LastError = ""
		}
		c := Component{Name: name, Status: s}
		c.Live, c.Ready, c.Reason = judge(s, now, h.cfg.StaleAfter)
		ok := c.Ready
		if probe == ProbeLive {
			ok = c.Live
		}
		rep.OK = rep.OK && ok
		rep.Components = append(rep.Components, c)
	}
	return rep
}

// judge is the rule: live while running; ready while running and not past
// its due time by more than staleAfter.
func judge(s Status, now time.Time, staleAfter time.Duration) (live, ready bool, reason string) {
	switch {
	case !s.Running:
		return false, false, "not running"
	case !s.Next.IsZero() && now.Sub(s.Next) > staleAfter:
		last := "never"
		if !s.Last.IsZero() {
			last = "last at " + s.Last.UTC().Format(time.RFC3339)
		}
		return true, false, fmt.Sprintf("stale: it has not reached its store since it was due at %s (%s), over %v ago",
			s.Next.UTC().Format(time.RFC3339), last, staleAfter)
	}
	return true, true, ""
}

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	probe := ""
	switch strings.TrimSuffix(r.URL.Path, "/") {
	case "", "/ready":
		probe = ProbeReady
	case "/live":
		probe = ProbeLive
	default:
		http.NotFound(w, r)
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	rep := h.Check(probe, time.Now())
	body, err := json.Marshal(rep)
	if err != nil { // cannot happen: the report holds strings, times and numbers
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	code := http.StatusOK
	if !rep.OK {
		code = http.StatusServiceUnavailable
	}
	w.WriteHeader(code)
	if r.Method != http.MethodHead {
		_, _ = w.Write(append(body, '\n'))
	}
}
