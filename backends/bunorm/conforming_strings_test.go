package bunorm

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/stdlib"
	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/pgdialect"
	"github.com/uptrace/bun/driver/pgdriver"

	"github.com/baton-go/baton/core/outbox"
	"github.com/baton-go/baton/internal/testenv"
)

// nonConformingDB is a bun.DB on pgx's stdlib driver over env's schema
// whose sessions have standard_conforming_strings off, set for these
// connections only (a start-up parameter); the server's configuration is
// not touched. (bun's own driver, pgdriver, refuses such a session by
// itself.)
func nonConformingDB(t *testing.T, env *testenv.PostgresEnv) *bun.DB {
	t.Helper()
	cc, err := pgxConnConfig(env.URL, map[string]string{"standard_conforming_strings": "off"})
	if err != nil {
		t.Fatal(err)
	}
	db := bun.NewDB(stdlib.OpenDB(*cc), pgdialect.New())
	t.Cleanup(func() { _ = db.Close() })
	var v string
	if err := db.QueryRowContext(testContext(t), "SHOW standard_conforming_strings").Scan(&v); err != nil || v != "off" {
		t.Fatalf("standard_conforming_strings is %q (%v); the test needs a session with it off", v, err)
	}
	return db
}

// injectedLane closes bun's quoted literal when a backslash escapes a
// quote (standard_conforming_strings off), chooses the payload with SQL of
// its own, and comments out the rest of the line.
const injectedLane = `\'::text, to_jsonb(current_user) --`

func TestEnqueue_ALaneCannotInjectSQLOnASessionWithoutStandardConformingStrings(t *testing.T) {
	env, _ := bunEnv(t)
	ctx := testContext(t)
	db := nonConformingDB(t, env)
	id := outbox.NewID()
	payload := `{"harmless": true}`
	err := db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		return Enqueue(ctx, tx, id, injectedLane, []byte(payload))
	})
	if err != nil {
		t.Fatalf("Enqueue: %v", err)
	}
	var lane, stored string
	if err := env.Pool.QueryRow(ctx, `SELECT lane, payload::text FROM baton_outbox WHERE id = $1`, [16]byte(id)).Scan(&lane, &stored); err != nil {
		t.Fatalf("reading the entry back: %v", err)
	}
	if lane != injectedLane || stored != payload {
		t.Errorf("the entry holds lane %q and payload %s, want lane %q and payload %s: the lane's text ran as SQL",
			lane, stored, injectedLane, payload)
	}
}

func TestPgdriver_RefusesASessionWithoutStandardConformingStrings(t *testing.T) {
	env := testenv.Postgres(t)
	db := bun.NewDB(sql.OpenDB(pgdriver.NewConnector(pgdriver.WithDSN(env.URL),
		pgdriver.WithConnParams(map[string]any{"standard_conforming_strings": "off"}))), pgdialect.New())
	t.Cleanup(func() { _ = db.Close() })
	if err := db.PingContext(testContext(t)); err == nil {
		t.Fatal("pgdriver connected with standard_conforming_strings off; the stores' own check is then the only guard")
	}
}

func TestStores_RefuseASessionWithoutStandardConformingStrings(t *testing.T) {
	env, _ := bunEnv(t)
	ctx := testContext(t)
	db := nonConformingDB(t, env)
	for what, err := range map[string]error{
		"NewLeaseStore":      errOf(NewLeaseStore(ctx, db, LeaseStoreOptions{})),
		"NewOutboxStore":     errOf(NewOutboxStore(ctx, db, OutboxStoreOptions{})),
		"NewProjectionStore": errOf(NewProjectionStore(ctx, db, ProjectionStoreOptions{})),
		"NewWorkRows":        errOf(NewWorkRows[int64, suiteRow](ctx, db, suiteOptions())),
		"CreateSchema":       CreateSchema(ctx, db, SchemaOptions{}),
		"DropSchema":         DropSchema(ctx, db, SchemaOptions{}),
	} {
		if !errors.Is(err, ErrNonStandardStrings) || !strings.Contains(err.Error(), what) && !strings.HasSuffix(what, "Schema") {
			t.Errorf("%s on a session with standard_conforming_strings off: %v; want ErrNonStandardStrings", what, err)
		}
	}
	// The tables are still there: DropSchema refused before touching them.
	var n int
	if err := env.Pool.QueryRow(ctx, `SELECT count(*) FROM baton_outbox`).Scan(&n); err != nil {
		t.Errorf("after the refused DropSchema: %v", err)
	}
	// And on a session with the setting on, the same calls succeed.
	ok := openBun(t, env)
	if _, err := NewOutboxStore(ctx, ok, OutboxStoreOptions{}); err != nil {
		t.Errorf("NewOutboxStore on a conforming session: %v", err)
	}
}

func TestEscapedText_MeansTheSameUnderEitherSetting(t *testing.T) {
	env, on := bunEnv(t)
	ctx := testContext(t)
	off := nonConformingDB(t, env)
	for _, s := range []string{`plain`, `it's`, `back\slash`, `\'`, `\\''\`, `E'x'`, "é\n\t日本", `$$`, `?0 ?1`} {
		for name, db := range map[string]*bun.DB{"on": on, "off": off} {
			var got string
			if err := db.NewRaw(`SELECT ?::text`, escapedText(s)).Scan(ctx, &got); err != nil || got != s {
				t.Errorf("standard_conforming_strings %s: %q came back as %q (%v)", name, s, got, err)
			}
		}
	}
}
