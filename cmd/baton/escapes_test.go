package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/baton-go/baton/backends/pgxstore"
	"github.com/baton-go/baton/core/lease"
	"github.com/baton-go/baton/core/outbox"
)

// hostile is text an engine's answer (quoted in a dead letter's error) or
// a lease row could hold: an OSC title change, a screen clear, a carriage
// return that overwrites the line, an 8-bit CSI, DEL, a right-to-left
// override and a byte that is not UTF-8.
const hostile = "refused \x1b]0;pwned\x07\x1b[2J\rOK all fine\u009b31m\x7f\u202etxt.exe"

// terminalSafe reports the first thing in s a terminal would act on.
func terminalSafe(s string) (string, bool) {
	for i, r := range s {
		switch {
		case r == utf8.RuneError:
			return s[i:], false
		case r == '\n':
		case r < 0x20, r == 0x7f, r >= 0x80 && r <= 0x9f:
			return s[i:], false
		case r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069, r == 0x200e, r == 0x200f, r == 0x061c:
			return s[i:], false
		}
	}
	return "", true
}

func TestCLI_NeutralisesControlCharactersInEverythingItPrints(t *testing.T) {
	env := migrated(t)
	ctx := testContext(t)
	seed := seedOutbox(t, env)
	// A second pass parks the last entry with a hostile reason and records
	// a hostile last_error.
	str := func(s string) *string { return &s }
	if err := seed.store.Settle(ctx, outbox.Settlement{
		From:  seed.entries[2].Cursor(),
		To:    seed.entries[2].Cursor(),
		State: map[string]*string{outbox.KeyLastError: str(hostile)},
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := env.Pool.Exec(ctx, `UPDATE baton_outbox_dead SET error = $1, lane = $2 WHERE id = $3`,
		hostile, "lane\x1b[1m", seed.parked); err != nil {
		t.Fatal(err)
	}
	leases, err := pgxstore.NewLeaseStore(env.Pool, pgxstore.LeaseStoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := leases.Heartbeat(ctx, lease.HeartbeatRequest{
		Holder: "node\x1b]8;;http://evil.example\x07a", Address: "http://10.0.0.1:8080\r\x1b[2K", LeaseDuration: time.Minute,
		Claims: []lease.Claim{{Role: "role\u202e"}},
	}); err != nil {
		t.Fatal(err)
	}

	db := []string{"--postgres", env.URL}
	for _, args := range [][]string{
		{"outbox", "status"},
		{"outbox", "dead", "list"},
		{"outbox", "dead", "show", seed.parked.String()},
		{"leases"},
	} {
		for _, asJSON := range []bool{false, true} {
			a := append(append([]string{}, args...), db...)
			if asJSON {
				a = append(a, "--json")
			}
			r := runCLI(t, a...).wantCode(t, exitOK)
			if rest, ok := terminalSafe(r.stdout + r.stderr); !ok {
				t.Errorf("baton %v printed a control character: %q", a, rest[:min(len(rest), 20)])
			}
			if asJSON {
				var v any
				if err := json.Unmarshal([]byte(r.stdout), &v); err != nil {
					t.Errorf("baton %v: the neutralised output is not JSON: %v\n%s", a, err, r.stdout)
				} else if b, _ := json.Marshal(v); !strings.Contains(string(b), `\u001b]0;pwned`) && args[0] != "leases" {
					t.Errorf("baton %v: the JSON lost the error's text: %s", a, b)
				}
			} else if args[0] != "leases" && args[len(args)-1] != "list" && !strings.Contains(r.stdout, `\u001b]0;pwned`) {
				t.Errorf("baton %v shows no trace of the escape sequence (want it visible, escaped):\n%s", a, r.stdout)
			}
		}
	}
}
