package projection_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/baton-go/baton/core/projection"
)

func TestSweeper_SweepsAtOnceThenEveryInterval(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		store := newCountingStore()
		for range 3 {
			store.write(t, alice, doc("d", 1))
		}
		s, err := projection.NewSweeper(projection.SweeperConfig{Store: store, Interval: 30 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		runInBackground(t, s.Run)
		synctest.Wait()
		if _, sweeps := store.counts(); sweeps != 1 {
			t.Fatalf("%d sweeps at start, want 1", sweeps)
		}
		infos, _ := store.Generations(ctx, alice)
		if len(infos) != 1 || !infos[0].Active {
			t.Fatalf("after the first sweep: %+v, want only the active generation", infos)
		}
		time.Sleep(5 * time.Minute)
		synctest.Wait()
		if _, sweeps := store.counts(); sweeps != 11 {
			t.Fatalf("%d sweeps after 5 minutes at 30s, want 11", sweeps)
		}
		if m, found, err := store.Mask(ctx, alice, "doc", "d"); err != nil || !found || m != 1 {
			t.Fatalf("the active generation after sweeps: %v, %v, %v", m, found, err)
		}
	})
}

func TestSweeper_FailedSweepDoesNotStopRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := newCountingStore()
		store.sweepErr = errors.New("database restarting")
		s, err := projection.NewSweeper(projection.SweeperConfig{Store: store})
		if err != nil {
			t.Fatal(err)
		}
		runInBackground(t, s.Run)
		time.Sleep(projection.DefaultSweepInterval * 3)
		synctest.Wait()
		if _, sweeps := store.counts(); sweeps != 4 {
			t.Fatalf("%d sweeps in 3 default intervals, want 4 despite failures", sweeps)
		}
		if _, err := s.Sweep(context.Background()); err == nil {
			t.Fatal("Sweep hid the store's error")
		}
	})
}

func TestSweeper_RunTwiceAtOnceIsRefused(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, err := projection.NewSweeper(projection.SweeperConfig{Store: newCountingStore()})
		if err != nil {
			t.Fatal(err)
		}
		runInBackground(t, s.Run)
		synctest.Wait()
		if err := s.Run(context.Background()); !errors.Is(err, projection.ErrRunning) {
			t.Fatalf("a second Run = %v, want ErrRunning", err)
		}
	})
}

func TestNewSweeper_RejectsInvalidOptionsNamingTheField(t *testing.T) {
	for mention, opts := range map[string]projection.SweeperConfig{
		"SweeperConfig.Store":    {},
		"SweeperConfig.Interval": {Store: newCountingStore(), Interval: -time.Second},
	} {
		_, err := projection.NewSweeper(opts)
		if !errors.Is(err, projection.ErrInvalidConfig) || !strings.Contains(err.Error(), mention) {
			t.Errorf("NewSweeper(%s) = %v", mention, err)
		}
	}
}
