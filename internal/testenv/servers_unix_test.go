//go:build unix

package testenv

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
)

func TestPostgresServer_StopsResetsItsTransactionCounterAndStartsAgain(t *testing.T) {
	c := StartPostgresServer(t)
	ctx := context.Background()
	xid := func() uint64 {
		t.Helper()
		conn, err := pgx.Connect(ctx, c.URL())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		var x uint64
		if err := conn.QueryRow(ctx, "SELECT pg_current_xact_id()::text::bigint").Scan(&x); err != nil {
			t.Fatal(err)
		}
		return x
	}
	if x := xid(); x >= 1<<32 {
		t.Fatalf("a fresh cluster's xid is %d, in epoch %d", x, x>>32)
	}
	c.Stop(false)
	if _, err := c.Tool("pg_resetwal", "-e", "5", "-D", c.DataDir()); err != nil {
		t.Fatal(err)
	}
	c.Start()
	if x := xid(); x>>32 != 5 {
		t.Fatalf("after pg_resetwal -e 5 the xid is %d, in epoch %d; want epoch 5", x, x>>32)
	}
}
