package testenv

import (
	"context"
	"flag"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/testcontainers/testcontainers-go"
	tclog "github.com/testcontainers/testcontainers-go/log"
	tcpostgres "github.com/testcontainers/testcontainers-go/modules/postgres"
	tcredis "github.com/testcontainers/testcontainers-go/modules/redis"
	"go.uber.org/goleak"
)

// Containers: the last tier, used only when a Docker engine answers.

const (
	postgresImage = "postgres:17-alpine"
	redisImage    = "redis:7-alpine"

	// dockerCheckTimeout bounds the search for a Docker engine, so that a
	// machine without one (or with one that hangs) is passed over quickly.
	dockerCheckTimeout = 3 * time.Second
	// containerStartTimeout includes pulling the image the first time.
	containerStartTimeout = 5 * time.Minute
)

var docker struct {
	once sync.Once
	err  error
}

// dockerUsed is set once this binary has started a container: Main then
// tolerates testcontainers' own background goroutines.
var dockerUsed atomic.Bool

// dockerEngine reports whether a Docker engine answers, checking once per
// test binary.
func dockerEngine() error {
	docker.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), dockerCheckTimeout)
		defer cancel()
		// testcontainers looks for the engine (DOCKER_HOST, the default
		// socket, ~/.testcontainers.properties, rootless sockets) once per
		// process and caches the answer; looking here first, under a short
		// deadline, keeps a missing or stuck engine from stalling later calls.
		cli, err := testcontainers.NewDockerClientWithOpts(ctx)
		if err != nil {
			docker.err = fmt.Errorf("no Docker engine answers (%w)", err)
			return
		}
		cli.Close()
		provider, err := testcontainers.ProviderDefault.GetProvider(testcontainers.WithLogger(containerLogger()))
		if err != nil {
			docker.err = fmt.Errorf("no Docker engine answers (%w)", err)
			return
		}
		if err := provider.Health(ctx); err != nil { // Health also closes the provider
			docker.err = fmt.Errorf("no Docker engine answers (%w)", err)
		}
	})
	return docker.err
}

// containerLogger keeps testcontainers quiet unless the tests run with -v.
func containerLogger() tclog.Logger {
	if flag.Parsed() && testing.Verbose() {
		return tclog.Default()
	}
	return tclog.NewNoopLogger()
}

func startPostgresContainer() (running, error) {
	if err := dockerEngine(); err != nil {
		return running{}, err
	}
	dockerUsed.Store(true)
	ctx, cancel := context.WithTimeout(context.Background(), containerStartTimeout)
	defer cancel()
	ctr, err := tcpostgres.Run(ctx, postgresImage,
		testcontainers.WithLogger(containerLogger()),
		tcpostgres.BasicWaitStrategies(),
		testcontainers.WithTmpfs(map[string]string{"/var/lib/postgresql/data": "rw"}),
	)
	if err != nil {
		_ = testcontainers.TerminateContainer(ctr)
		return running{}, fmt.Errorf("start %s: %w", postgresImage, err)
	}
	stop := func() error { return testcontainers.TerminateContainer(ctr) }
	url, err := ctr.ConnectionString(ctx, "sslmode=disable")
	if err == nil {
		err = pingUntil(ctx, func(ctx context.Context) error { return pingPostgresCtx(ctx, url) })
	}
	if err != nil {
		_ = stop()
		return running{}, fmt.Errorf("%s: %w", postgresImage, err)
	}
	return running{srv: server{addr: url, tier: tierDocker}, stop: stop}, nil
}

func startRedisContainer() (running, error) {
	if err := dockerEngine(); err != nil {
		return running{}, err
	}
	dockerUsed.Store(true)
	ctx, cancel := context.WithTimeout(context.Background(), containerStartTimeout)
	defer cancel()
	ctr, err := tcredis.Run(ctx, redisImage, testcontainers.WithLogger(containerLogger()))
	if err != nil {
		_ = testcontainers.TerminateContainer(ctr)
		return running{}, fmt.Errorf("start %s: %w", redisImage, err)
	}
	stop := func() error { return testcontainers.TerminateContainer(ctr) }
	addr, err := ctr.PortEndpoint(ctx, "6379/tcp", "")
	if err == nil {
		err = pingUntil(ctx, func(ctx context.Context) error { return pingRedisCtx(ctx, addr) })
	}
	if err != nil {
		_ = stop()
		return running{}, fmt.Errorf("%s: %w", redisImage, err)
	}
	return running{srv: server{addr: addr, tier: tierDocker}, stop: stop}, nil
}

// pingUntil retries ping until it succeeds or ctx ends: a published port
// can lag the container's own readiness.
func pingUntil(ctx context.Context, ping func(context.Context) error) error {
	for {
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := ping(pctx)
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// dockerLeakIgnores lists the goroutines testcontainers keeps for the life
// of the process once it has run a container: the connection that tells the
// reaper container which containers to remove if this process dies, and the
// Docker client's idle HTTP connections.
func dockerLeakIgnores() []goleak.Option {
	return []goleak.Option{
		goleak.IgnoreAnyFunction("github.com/testcontainers/testcontainers-go.(*Reaper).connect.func1"),
		goleak.IgnoreAnyFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreAnyFunction("net/http.(*persistConn).writeLoop"),
	}
}
