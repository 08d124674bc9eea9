package lock_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/baton-go/baton/core/lock"
	"github.com/baton-go/baton/locks/memory"
)

type lockLog struct {
	mu       sync.Mutex
	acquires []lock.Acquire
	ends     []lock.End
}

func (l *lockLog) AcquireEnded(_ context.Context, a lock.Acquire) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.acquires = append(l.acquires, a)
}

func (l *lockLog) LockEnded(e lock.End) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ends = append(l.ends, e)
}

func TestWithHooks_NilHooksReturnTheProviderItself(t *testing.T) {
	p, err := memory.NewProvider(memory.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got := lock.WithHooks(p, nil); got != lock.Provider(p) {
		t.Errorf("WithHooks(p, nil) = %T, want p itself", got)
	}
}

func TestWithHooks_ReportsEveryAcquireAndEveryLocksEnd(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p, err := memory.NewProvider(memory.Options{})
		if err != nil {
			t.Fatal(err)
		}
		log := &lockLog{}
		hp := lock.WithHooks(p, log)
		ctx := context.Background()

		first, err := hp.Acquire(ctx, "leader", lock.AcquireOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := hp.Acquire(ctx, "leader", lock.AcquireOptions{Wait: 3 * time.Second}); !errors.Is(err, lock.ErrNotAcquired) {
			t.Fatalf("second Acquire: %v, want ErrNotAcquired", err)
		}
		time.Sleep(time.Second)
		if err := first.Release(ctx); err != nil {
			t.Fatal(err)
		}
		second, err := hp.Acquire(ctx, "leader", lock.AcquireOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if !p.TakeAway("leader") {
			t.Fatal("TakeAway found no holder")
		}
		<-second.Lost()
		synctest.Wait()
		if err := second.Release(ctx); !errors.Is(err, lock.ErrNotHeld) {
			t.Fatalf("Release after loss: %v, want ErrNotHeld", err)
		}

		log.mu.Lock()
		defer log.mu.Unlock()
		if len(log.acquires) != 3 {
			t.Fatalf("acquires %+v, want 3", log.acquires)
		}
		a0, a1, a2 := log.acquires[0], log.acquires[1], log.acquires[2]
		if a0.Err != nil || a0.Token != first.Token() || a0.Name != "leader" {
			t.Errorf("first acquire %+v", a0)
		}
		if !errors.Is(a1.Err, lock.ErrNotAcquired) || a1.Wait != 3*time.Second || a1.Took != 3*time.Second || a1.Token != 0 {
			t.Errorf("refused acquire %+v, want ErrNotAcquired after its 3s wait", a1)
		}
		if a2.Err != nil || a2.Token <= a0.Token {
			t.Errorf("third acquire %+v, want a larger token than %d", a2, a0.Token)
		}
		want := []lock.End{
			{Name: "leader", Token: first.Token(), Released: true, Held: 4 * time.Second},
			{Name: "leader", Token: second.Token(), Released: false},
		}
		if len(log.ends) == 2 {
			want[1].Held = log.ends[1].Held // until the keepalive's refresh found it taken away
		}
		if len(log.ends) != 2 || log.ends[0] != want[0] || log.ends[1] != want[1] {
			t.Errorf("ends %+v, want %+v (each lock once: released, then lost)", log.ends, want)
		}
	})
}
