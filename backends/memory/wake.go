package memory

import (
	"context"
	"errors"
	"sync"
)

// ErrListenerClosed is returned by a listener's Idle and Wait after its
// Close.
var ErrListenerClosed = errors.New("baton/memory: the listener is closed")

// bus is a store's listeners: what PostgreSQL's LISTEN/NOTIFY and the idle
// gate are for the database adapters. A commit signals the listeners that
// are idle, as a database producer signals only while a listener waits; a
// memory commit is one step, so no producer is ever in flight.
type bus struct {
	mu        sync.Mutex
	listeners map[*listener]struct{}
}

// listener is one listening session on a bus.
type listener struct {
	b    *bus
	wake chan struct{} // holds one token while a signal is pending

	// Guarded by b.mu.
	idle    bool
	pending bool
	xid     uint64 // the largest signalled xid pending
	closed  bool
}

func (b *bus) listen() *listener {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.listeners == nil {
		b.listeners = make(map[*listener]struct{})
	}
	l := &listener{b: b, wake: make(chan struct{}, 1)}
	b.listeners[l] = struct{}{}
	return l
}

// signal wakes every idle listener with xid.
func (b *bus) signal(xid uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for l := range b.listeners {
		if !l.idle {
			continue
		}
		l.pending, l.xid = true, max(l.xid, xid)
		select {
		case l.wake <- struct{}{}:
		default:
		}
	}
}

// setIdle marks l idle (commits signal it from now on) or not.
func (l *listener) setIdle(ctx context.Context, idle bool) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	l.b.mu.Lock()
	defer l.b.mu.Unlock()
	if l.closed {
		return ErrListenerClosed
	}
	l.idle = idle
	return nil
}

// wait blocks until a signal is pending and takes it, ending the idle
// state as a database listener's wake does.
func (l *listener) wait(ctx context.Context) (uint64, error) {
	for {
		l.b.mu.Lock()
		switch {
		case l.closed:
			l.b.mu.Unlock()
			return 0, ErrListenerClosed
		case l.pending:
			xid := l.xid
			l.pending, l.xid, l.idle = false, 0, false
			l.b.mu.Unlock()
			return xid, nil
		}
		l.b.mu.Unlock()
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-l.wake:
		}
	}
}

func (l *listener) close() error {
	l.b.mu.Lock()
	defer l.b.mu.Unlock()
	l.closed = true
	delete(l.b.listeners, l)
	select {
	case l.wake <- struct{}{}:
	default:
	}
	return nil
}
