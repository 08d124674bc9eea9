package testenv

import (
	"context"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
)

func TestMain(m *testing.M) {
	RunChild(childRoles)
	Main(m)
}

func TestParseTiers(t *testing.T) {
	for _, v := range []string{"", "auto", " auto "} {
		got, err := parseTiers(v)
		if err != nil || !slices.Equal(got, allTiers) {
			t.Errorf("parseTiers(%q) = %v, %v; want %v", v, got, err, allTiers)
		}
	}
	got, err := parseTiers("docker, local")
	if err != nil || !slices.Equal(got, []string{tierDocker, tierLocal}) {
		t.Errorf("parseTiers(docker, local) = %v, %v", got, err)
	}
	if _, err := parseTiers("local,podman"); err == nil || !strings.Contains(err.Error(), "podman") {
		t.Errorf("parseTiers(local,podman) error = %v; want one naming podman", err)
	}
}

// logServer reports which server a lookup found, in a line that
// TestForcedThrowawayTier reads from a child test binary.
func logServer(t *testing.T, kind string, l *lookup) {
	t.Helper()
	t.Logf("testenv-server kind=%s tier=%s pid=%d dir=%s", kind, l.srv.tier, l.srv.pid, l.srv.dir)
}

func TestPostgresIsolation(t *testing.T) {
	var schema, serverURL string
	t.Run("test", func(t *testing.T) {
		env := Postgres(t)
		logServer(t, "postgres", &pgLookup)
		schema, serverURL = env.Schema, env.ServerURL
		ctx := t.Context()

		var current string
		if err := env.Pool.QueryRow(ctx, "SELECT current_schema()").Scan(&current); err != nil {
			t.Fatal(err)
		}
		if current != env.Schema {
			t.Fatalf("pool's current schema is %q, want %q", current, env.Schema)
		}
		if _, err := env.Pool.Exec(ctx, "CREATE TABLE items (id int PRIMARY KEY)"); err != nil {
			t.Fatal(err)
		}
		if _, err := env.Pool.Exec(ctx, "INSERT INTO items VALUES (1), (2)"); err != nil {
			t.Fatal(err)
		}

		// The same table is reachable through URL and lives in Schema.
		conn, err := pgx.Connect(ctx, env.URL)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(context.Background())
		var n int
		if err := conn.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{env.Schema, "items"}.Sanitize()).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != 2 {
			t.Fatalf("items holds %d rows, want 2", n)
		}
		if !schemaExists(t, env.ServerURL, env.Schema) {
			t.Fatalf("schema %s does not exist during the test", env.Schema)
		}
	})
	if schema == "" {
		t.Skip("no PostgreSQL server")
	}
	if schemaExists(t, serverURL, schema) {
		t.Errorf("schema %s still exists after its test ended", schema)
	}
}

func schemaExists(t *testing.T, url, schema string) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)", schema).Scan(&exists); err != nil {
		t.Fatal(err)
	}
	return exists
}

func TestRedisIsolation(t *testing.T) {
	// A key of another test, present while this one cleans up.
	c := redis.NewClient(&redis.Options{Addr: RedisAddr(t)})
	defer c.Close()
	outside := "baton-test:" + randomHex(6) + ":kept"
	if err := c.Set(t.Context(), outside, "kept", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	defer c.Del(context.Background(), outside)

	var prefix string
	var keys []string
	t.Run("test", func(t *testing.T) {
		env := Redis(t)
		logServer(t, "redis", &redisLookup)
		prefix = env.Prefix
		ctx := t.Context()

		keys = []string{env.Prefix + "string", env.Prefix + "hash", env.Prefix + "nested:key"}
		if err := env.Client.Set(ctx, keys[0], "v", 0).Err(); err != nil {
			t.Fatal(err)
		}
		if err := env.Client.HSet(ctx, keys[1], "f", "v").Err(); err != nil {
			t.Fatal(err)
		}
		if err := env.Client.Set(ctx, keys[2], "v", time.Hour).Err(); err != nil {
			t.Fatal(err)
		}
		// Enough keys that deleting them takes more than one SCAN page.
		pipe := env.Client.Pipeline()
		for i := range 2500 {
			pipe.Set(ctx, env.Prefix+"bulk:"+strings.Repeat("x", i%7)+randomHex(4), i, 0)
		}
		if _, err := pipe.Exec(ctx); err != nil {
			t.Fatal(err)
		}
	})
	if prefix == "" {
		t.Fatal("the test did not run")
	}

	ctx := t.Context()
	n, err := c.Exists(ctx, keys...).Result()
	if err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("%d of the test's keys survived it", n)
	}
	left, _, err := c.Scan(ctx, 0, prefix+"*", 10000).Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(left) != 0 {
		t.Errorf("keys under %s survived the test: %d, e.g. %s", prefix, len(left), left[0])
	}
	if v, err := c.Get(ctx, outside).Result(); err != nil || v != "kept" {
		t.Errorf("key outside the prefix: %q, %v; want it untouched", v, err)
	}
}

// runChild runs this test binary again with -test.run=run and the given
// environment (CI and the variables of this package are cleared first).
func runChild(t *testing.T, run string, env ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run="+run, "-test.v", "-test.count=1", "-test.timeout=3m")
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		switch name {
		case "CI", EnvServers, EnvPostgresURL, EnvRedisAddr:
			continue
		}
		cmd.Env = append(cmd.Env, kv)
	}
	cmd.Env = append(cmd.Env, env...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// serverLines parses the logServer lines of a child's output.
func serverLines(out string) map[string]map[string]string {
	found := map[string]map[string]string{}
	for _, line := range strings.Split(out, "\n") {
		_, rest, ok := strings.Cut(line, "testenv-server ")
		if !ok {
			continue
		}
		fields := map[string]string{}
		for _, f := range strings.Fields(rest) {
			k, v, _ := strings.Cut(f, "=")
			fields[k] = v
		}
		found[fields["kind"]] = fields
	}
	return found
}

func TestDockerTier(t *testing.T) {
	start := time.Now()
	err := dockerEngine()
	if took := time.Since(start); took > 2*dockerCheckTimeout {
		t.Errorf("looking for a Docker engine took %v", took)
	}
	if err != nil {
		t.Logf("as expected without a Docker engine: %v", err)
		// The forced docker tier gives up at once, saying why.
		for _, find := range []func([]string) (server, error){findPostgres, findRedis} {
			start := time.Now()
			_, err := find([]string{tierDocker})
			if err == nil || !strings.Contains(err.Error(), "docker: no Docker engine answers") {
				t.Errorf("docker tier without an engine: error %v", err)
			}
			if took := time.Since(start); took > time.Second {
				t.Errorf("docker tier without an engine took %v", took)
			}
		}
		return
	}
	if testing.Short() {
		t.Skip("a Docker engine answers; -short skips starting containers")
	}
	for _, start := range []func() (running, error){startPostgresContainer, startRedisContainer} {
		r, err := start()
		if err != nil {
			t.Fatal(err)
		}
		var ping error
		if strings.HasPrefix(r.srv.addr, "postgres") {
			ping = pingPostgres(r.srv.addr)
		} else {
			ping = pingRedis(r.srv.addr)
		}
		if err := r.stop(); err != nil {
			t.Error(err)
		}
		if ping != nil {
			t.Errorf("container at %s: %v", r.srv.addr, ping)
		}
	}
}

// TestNoServer checks the last resort: a test that finds no server is
// skipped, or failed when CI is set.
func TestNoServer(t *testing.T) {
	if dockerEngine() == nil {
		t.Skip("a Docker engine answers: the docker tier cannot be made to find nothing")
	}
	t.Parallel()
	out, err := runChild(t, "^TestPostgresIsolation$", EnvServers+"=docker")
	if err != nil || !strings.Contains(out, "--- SKIP") || !strings.Contains(out, "no PostgreSQL server for this test") {
		t.Errorf("without CI: %v\n%s", err, out)
	}
	out, err = runChild(t, "^TestRedisIsolation$", EnvServers+"=docker", "CI=true")
	if err == nil || !strings.Contains(out, "--- FAIL") || !strings.Contains(out, "no Redis server for this test") {
		t.Errorf("with CI: %v\n%s", err, out)
	}
}

// TestLeakCheck checks that Main fails a passing run that leaves a goroutine
// behind.
func TestLeakCheck(t *testing.T) {
	t.Parallel()
	out, err := runChild(t, "^TestHelperLeak$", "BATON_TESTENV_HELPER=leak")
	if err == nil || !strings.Contains(out, "goroutines still running after the tests") || !strings.Contains(out, "blockForever") {
		t.Errorf("child that leaks a goroutine: %v\n%s", err, out)
	}
}

// TestHelperLeak is run by TestLeakCheck in a child test binary.
func TestHelperLeak(t *testing.T) {
	if os.Getenv("BATON_TESTENV_HELPER") != "leak" {
		t.Skip("helper for TestLeakCheck")
	}
	go blockForever()
}

var never = make(chan struct{})

func blockForever() { <-never }
