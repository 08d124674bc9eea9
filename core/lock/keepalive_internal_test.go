package lock

import (
	"context"
	"testing"
	"testing/synctest"
	"time"
)

// A refresh answered after the trust window ended proves the key was still
// ours when the server answered, but the holder may have stopped trusting
// the lock by then, and Lost never reopens. Here the expiry callback is
// late (its timer stopped), as a loaded runtime can make it, so only
// extend's own check keeps the window shut.
func TestKeepalive_ASuccessAnsweredAfterTrustRanOutDoesNotReviveTheLock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		answer := make(chan struct{})
		k, err := NewKeepalive(KeepaliveConfig{
			TTL:          30 * time.Second,
			SafetyMargin: time.Second,
			Refresh: func(context.Context) error {
				<-answer // ignores its context: the answer comes late
				return nil
			},
		}, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		defer k.Stop()
		k.mu.Lock()
		k.expiry.Stop()
		k.mu.Unlock()

		// The first refresh starts at 10s; the window ends at 29s.
		time.Sleep(30 * time.Second)
		if k.Trusted() {
			t.Fatal("Trusted after the window ended")
		}
		close(answer)
		synctest.Wait()
		if k.Trusted() {
			t.Fatal("a success answered after trust ran out made the lock trusted again")
		}
		select {
		case <-k.Lost():
		default:
			t.Fatal("Lost is open although the window ended")
		}
	})
}
