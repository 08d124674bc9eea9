package conformance_test

import (
	"context"
	"sync"
	"time"

	"github.com/baton-go/baton/backends/memory"
)

// The announcement variants of leaseVariants.

// silentReleases claims to watch releases but never announces one.
type silentReleases struct{ *memory.LeaseStore }

func (silentReleases) WatchReleases(ctx context.Context, _ func(string)) error {
	<-ctx.Done()
	return ctx.Err()
}

// fanOut is a variant's own announcements: its WatchReleases calls the
// callback, on the watching goroutine, for every role a release (of the
// variant's choosing) sends.
type fanOut struct {
	mu   sync.Mutex
	subs map[chan announcement]struct{}
}

// announcement is one role sent to a watcher; done, if set, is closed once
// the watcher's callback has returned.
type announcement struct {
	role string
	done chan struct{}
}

func (f *fanOut) watch(ctx context.Context, released func(string), also func(ctx context.Context, released func(string)) error) error {
	sub := make(chan announcement, 256)
	f.mu.Lock()
	if f.subs == nil {
		f.subs = map[chan announcement]struct{}{}
	}
	f.subs[sub] = struct{}{}
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		delete(f.subs, sub)
		f.mu.Unlock()
	}()
	var wg sync.WaitGroup
	if also != nil { // the store's own announcements, into the same queue
		wg.Go(func() {
			_ = also(ctx, func(role string) {
				select {
				case sub <- announcement{role: role}:
				case <-ctx.Done():
				}
			})
		})
	}
	defer wg.Wait()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case a := <-sub:
			released(a.role)
			if a.done != nil {
				close(a.done)
			}
		}
	}
}

// send announces role to every watcher; with wait, it returns once each
// watcher's callback has returned.
func (f *fanOut) send(ctx context.Context, role string, wait bool) {
	f.mu.Lock()
	var dones []chan struct{}
	for sub := range f.subs {
		a := announcement{role: role}
		if wait {
			a.done = make(chan struct{})
			dones = append(dones, a.done)
		}
		sub <- a
	}
	f.mu.Unlock()
	for _, d := range dones {
		select {
		case <-d:
		case <-ctx.Done():
		case <-time.After(5 * time.Second): // the watcher has stopped
		}
	}
}

// announceRefusals announces every release, also one that released
// nothing.
type announceRefusals struct {
	*memory.LeaseStore
	fanOut
}

func (b *announceRefusals) Release(ctx context.Context, role, holder string, token uint64) (bool, error) {
	ok, err := b.LeaseStore.Release(ctx, role, holder, token)
	if err == nil && !ok {
		b.send(ctx, role, false)
	}
	return ok, err
}

func (b *announceRefusals) WatchReleases(ctx context.Context, released func(string)) error {
	return b.watch(ctx, released, b.LeaseStore.WatchReleases)
}

// announceFirst announces a release before making it, and makes it once
// every watcher has acted on the news.
type announceFirst struct {
	*memory.LeaseStore
	fanOut
}

func (b *announceFirst) Release(ctx context.Context, role, holder string, token uint64) (bool, error) {
	if row, ok := rowOf(ctx, b.LeaseStore, role); ok && token != 0 && row.Token == token && row.Holder == holder && live(row) {
		b.send(ctx, role, true)
	}
	return b.LeaseStore.Release(ctx, role, holder, token)
}

func (b *announceFirst) WatchReleases(ctx context.Context, released func(string)) error {
	return b.watch(ctx, released, nil)
}

// quietWatchEnd ends a watch without saying why.
type quietWatchEnd struct{ *memory.LeaseStore }

func (b quietWatchEnd) WatchReleases(ctx context.Context, released func(string)) error {
	err := b.LeaseStore.WatchReleases(ctx, released)
	if ctx.Err() != nil {
		return nil
	}
	return err
}
