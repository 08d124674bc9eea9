package main

import (
	"encoding/json"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/baton-go/baton/backends/pgxstore"
	"github.com/baton-go/baton/cmd/baton/internal/ops"
	"github.com/baton-go/baton/core/lease"
	"github.com/baton-go/baton/core/outbox"
)

func TestVersion(t *testing.T) {
	for _, flag := range []string{"--version", "-v"} {
		r := runCLI(t, flag).wantCode(t, exitOK)
		if !strings.HasPrefix(r.stdout, "baton ") || !strings.Contains(r.stdout, runtime.Version()) {
			t.Errorf("%s: %q", flag, r.stdout)
		}
	}
	got := formatVersion(&debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Version: "v1.2.0"}, Settings: []debug.BuildSetting{
		{Key: "vcs.revision", Value: "0123456789abcdef0123"}, {Key: "vcs.time", Value: "2026-05-01T12:00:00Z"}, {Key: "vcs.modified", Value: "true"},
	}})
	if want := "v1.2.0, commit 0123456789ab of 2026-05-01T12:00:00Z, modified, go1.26.0"; got != want {
		t.Errorf("formatVersion = %q, want %q", got, want)
	}
	if got := formatVersion(&debug.BuildInfo{GoVersion: "go1.26.0"}); got != "(devel), go1.26.0" {
		t.Errorf("formatVersion without a version = %q", got)
	}
}

func TestCompletion(t *testing.T) {
	for shell, want := range map[string]string{"bash": "bash completion", "zsh": "#compdef baton", "fish": "fish completion for baton"} {
		r := runCLI(t, "completion", shell).wantCode(t, exitOK)
		if !strings.Contains(r.stdout, want) {
			t.Errorf("completion %s lacks %q:\n%.200s", shell, want, r.stdout)
		}
	}
	// The dynamic completion cobra's scripts call names the subcommands.
	r := runCLI(t, "__complete", "outbox", "dead", "")
	for _, sub := range []string{"list", "show", "requeue"} {
		if !strings.Contains(r.stdout, sub) {
			t.Errorf("completing outbox dead lacks %q:\n%s", sub, r.stdout)
		}
	}
}

func TestLeases_NaturalOrderOfPartitions(t *testing.T) {
	env := migrated(t)
	store, err := pgxstore.NewLeaseStore(env.Pool, pgxstore.LeaseStoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var claims []lease.Claim
	for _, role := range []string{"devices:partition-10", "devices:partition-2", "devices:partition-1", "coordinator"} {
		claims = append(claims, lease.Claim{Role: role})
	}
	if _, err := store.Heartbeat(testContext(t), lease.HeartbeatRequest{Holder: "node-a", LeaseDuration: time.Minute, Claims: claims}); err != nil {
		t.Fatal(err)
	}
	r := runCLI(t, "leases", "--postgres", env.URL).wantCode(t, exitOK)
	var roles []string
	for _, line := range strings.Split(strings.TrimSpace(r.stdout), "\n")[1:] {
		roles = append(roles, strings.Fields(line)[0])
	}
	want := []string{"coordinator", "devices:partition-1", "devices:partition-2", "devices:partition-10"}
	if strings.Join(roles, " ") != strings.Join(want, " ") {
		t.Fatalf("leases listed %v, want %v", roles, want)
	}
}

func TestOutboxStatus_DatesAnOldLastError(t *testing.T) {
	env := migrated(t)
	store, err := pgxstore.NewOutboxStore(env.Pool, pgxstore.OutboxStoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	str := func(s string) *string { return &s }
	errorAt := time.Date(2026, 3, 1, 9, 30, 0, 0, time.UTC)
	if err := store.Settle(testContext(t), outbox.Settlement{State: map[string]*string{
		outbox.KeyLastScanAt:   str(time.Now().UTC().Format(time.RFC3339Nano)),
		outbox.KeyLastError:    str("lane graph.metadata: 503 Service Unavailable"),
		outbox.KeyLastErrorAt:  str(errorAt.Format(time.RFC3339Nano)),
		outbox.KeyFirstStuckAt: nil,
	}}); err != nil {
		t.Fatal(err)
	}
	r := runCLI(t, "outbox", "status", "--postgres", env.URL).wantCode(t, exitOK)
	for _, want := range []string{
		"not failing", "last_error is from an earlier failing streak, at " + ops.FormatTime(errorAt),
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("outbox status lacks %q:\n%s", want, r.stdout)
		}
	}
	var line string
	for _, l := range strings.Split(r.stdout, "\n") {
		if strings.HasPrefix(l, outbox.KeyLastErrorAt) {
			line = l
		}
	}
	if !strings.Contains(line, ops.FormatTime(errorAt)) {
		t.Errorf("the last_error_at row is %q, want the time %s", line, ops.FormatTime(errorAt))
	}
	var st ops.StatusReport
	r = runCLI(t, "outbox", "status", "--postgres", env.URL, "--json").wantCode(t, exitOK)
	if err := json.Unmarshal([]byte(r.stdout), &st); err != nil || st.Health.LastErrorAt == nil || !st.Health.LastErrorAt.Equal(errorAt) {
		t.Errorf("status --json: %v %+v", err, st.Health)
	}
}

// TestUnreachableDatabase_OneErrorLineSaidOnce: pgx tries a host with TLS,
// then without, and its error repeats the dial error once per attempt;
// each command says it once, on one line.
func TestUnreachableDatabase_OneErrorLineSaidOnce(t *testing.T) {
	for _, url := range []string{"postgres://127.0.0.1:1/x", "postgres://localhost:1/x?connect_timeout=2"} {
		for _, args := range [][]string{
			{"outbox", "status"}, {"outbox", "dead", "list"}, {"leases"}, {"verify"}, {"schema", "status"},
			{"migrate"}, {"migrate", "--dry-run"}, {"bench", "--count", "10"},
		} {
			r := runCLI(t, append(args, "--postgres", url)...).wantCode(t, exitFailure)
			line := strings.TrimSuffix(r.stderr, "\n")
			if strings.Contains(line, "\n") || !strings.HasPrefix(line, "baton: cannot connect to PostgreSQL at ") {
				t.Errorf("%v %s: stderr %q, want one line saying it cannot connect", args, url, r.stderr)
				continue
			}
			// Every part of the message once: the attempts' errors are
			// joined with "; ".
			_, detail, _ := strings.Cut(line, "`: ")
			parts := strings.Split(detail, "; ")
			for i, p := range parts {
				if slices.Contains(parts[:i], p) {
					t.Errorf("%v %s: %q said twice in %q", args, url, p, line)
				}
			}
			if n := strings.Count(line, "connection refused"); url == "postgres://127.0.0.1:1/x" && n != 1 {
				t.Errorf("%v: the dial error said %d times: %q", args, n, line)
			}
			if r.stdout != "" {
				t.Errorf("%v: stdout %q", args, r.stdout)
			}
		}
	}
}
