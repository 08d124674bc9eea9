package lease_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/baton-go/baton/core/lease"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const (
	testLease   = 10 * time.Second
	testRenew   = 2 * time.Second
	testMargin  = time.Second
	testTrusted = testLease - testMargin
)

func newManager(t *testing.T, store lease.Store, id string) *lease.Manager {
	t.Helper()
	m, err := lease.NewManager(lease.Config{
		Store: store, InstanceID: id, Address: "http://" + id,
		LeaseDuration: testLease, RenewInterval: testRenew, HeldSafetyMargin: testMargin,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close(context.Background()) })
	return m
}

func register(t *testing.T, m *lease.Manager, role string) *lease.Lease {
	t.Helper()
	l, err := m.Register(role)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// start runs m in a goroutine of its own until the test ends; the cleanup
// closes m and waits for Run to return.
func start(t *testing.T, m *lease.Manager) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- m.Run(context.Background()) }()
	t.Cleanup(func() {
		m.Close(context.Background())
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
}

func TestManager_FirstInstanceTakesAFreeRoleAtStart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := newFakeStore()
		m := newManager(t, store, "a")
		l := register(t, m, "maintenance")
		if l.IsHeld() {
			t.Fatal("held before the manager started")
		}
		start(t, m)
		synctest.Wait()
		if !l.IsHeld() || l.Token() != 1 || l.CurrentHolder() != "a" || l.CurrentHolderAddress() != "http://a" {
			t.Fatalf("after start: held=%v token=%d holder=%q address=%q", l.IsHeld(), l.Token(), l.CurrentHolder(), l.CurrentHolderAddress())
		}
	})
}

func TestManager_SecondInstanceSeesTheHolderAndDoesNotHold(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := newFakeStore()
		a, b := newManager(t, store, "a"), newManager(t, store, "b")
		la, lb := register(t, a, "maintenance"), register(t, b, "maintenance")
		start(t, a)
		synctest.Wait()
		start(t, b)
		time.Sleep(time.Minute)
		if !la.IsHeld() || lb.IsHeld() {
			t.Fatalf("held: a=%v b=%v", la.IsHeld(), lb.IsHeld())
		}
		if lb.CurrentHolder() != "a" || lb.CurrentHolderAddress() != "http://a" || lb.Token() != 0 {
			t.Fatalf("b sees holder %q at %q, token %d", lb.CurrentHolder(), lb.CurrentHolderAddress(), lb.Token())
		}
	})
}

func TestManager_OneHeartbeatPerTickCoversEveryRole(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := newFakeStore()
		one := newManager(t, store, "one")
		register(t, one, "solo")
		many := newManager(t, store, "many")
		if _, err := many.RegisterPartition("devices", 64); err != nil {
			t.Fatal(err)
		}
		start(t, one)
		start(t, many)
		synctest.Wait()
		time.Sleep(10*testRenew - time.Millisecond)
		synctest.Wait()
		a, b := store.heartbeats("one"), store.heartbeats("many")
		if a != 10 || b != 10 {
			t.Fatalf("store calls in 10 ticks: 1 role %d, 64 partitions %d; want 10 each", a, b)
		}
	})
}

func TestLease_IsHeldEndsOnItsOwnWhenTheStoreIsUnreachable(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := newFakeStore()
		m := newManager(t, store, "a")
		l := register(t, m, "maintenance")
		start(t, m)
		synctest.Wait()
		time.Sleep(3 * testRenew) // a few good renewals
		synctest.Wait()
		store.cut("a", true)
		lastGood := time.Now() // the last success started at this tick
		for l.IsHeld() {
			time.Sleep(time.Millisecond)
		}
		if got := time.Since(lastGood); got != testTrusted {
			t.Fatalf("IsHeld turned false %v after the last good renewal started, want LeaseDuration-HeldSafetyMargin = %v", got, testTrusted)
		}
		if l.Token() != 0 {
			t.Fatal("Token is non-zero while not held")
		}
	})
}

func TestLease_IsHeldEndsOnItsOwnWhenHeartbeatsHang(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := newFakeStore()
		m := newManager(t, store, "a")
		l := register(t, m, "maintenance")
		start(t, m)
		synctest.Wait()
		lastGood := time.Now()
		undo := store.hang("a")
		defer undo()
		for l.IsHeld() {
			time.Sleep(time.Millisecond)
		}
		if got := time.Since(lastGood); got != testTrusted {
			t.Fatalf("IsHeld turned false after %v, want %v", got, testTrusted)
		}
	})
}

// With the default timings, one heartbeat that never answers (a lost
// packet) must cost nothing: the next heartbeat is due RenewInterval after
// the lost one started, and the lost one gives up by then, so the holder
// renews its term before its trust runs out.
func TestLease_DefaultTimingsSurviveOneHeartbeatThatNeverAnswers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := newFakeStore()
		m, err := lease.NewManager(lease.Config{Store: store, InstanceID: "solo"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { m.Close(context.Background()) })
		l := register(t, m, "maintenance")
		start(t, m)
		synctest.Wait()
		time.Sleep(lease.DefaultRenewInterval / 2)
		store.blackhole("solo", 1) // the next heartbeat is lost
		began := time.Now()
		for time.Since(began) < 4*lease.DefaultLeaseDuration {
			if !l.IsHeld() {
				t.Fatalf("not held %v after one heartbeat was lost", time.Since(began))
			}
			time.Sleep(100 * time.Millisecond)
		}
		if l.Token() != 1 {
			t.Fatalf("token %d after one lost heartbeat, want the first term (1) kept", l.Token())
		}
	})
}

// The next heartbeat counts from the start of the previous one, so a slow
// store does not stretch the cadence.
func TestManager_HeartbeatsStartEveryRenewIntervalHoweverLongTheyTake(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := newFakeStore()
		m := newManager(t, store, "a")
		register(t, m, "maintenance")
		start(t, m)
		synctest.Wait()
		store.blackhole("a", 3) // three heartbeats in a row run until their timeout
		time.Sleep(5*testRenew - time.Millisecond)
		synctest.Wait()
		if got := store.heartbeats("a"); got != 5 {
			t.Fatalf("%d heartbeats started in 5 intervals, want 5: a heartbeat that runs to its timeout delayed the next", got)
		}
	})
}

func TestManager_SuccessorTakesOverAfterTheHolderStopsHeartbeating(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := newFakeStore()
		a, b := newManager(t, store, "a"), newManager(t, store, "b")
		la, lb := register(t, a, "maintenance"), register(t, b, "maintenance")
		start(t, a)
		synctest.Wait()
		start(t, b)
		synctest.Wait()
		store.cut("a", true) // a is alive but can no longer reach the store
		stopped := time.Now()
		for !lb.IsHeld() {
			if la.IsHeld() && lb.IsHeld() {
				t.Fatal("two holders")
			}
			time.Sleep(10 * time.Millisecond)
		}
		if took := time.Since(stopped); took > testLease+testRenew {
			t.Fatalf("successor took over after %v, want within LeaseDuration+RenewInterval (%v)", took, testLease+testRenew)
		}
		if la.IsHeld() {
			t.Fatal("the cut-off holder still believes it holds")
		}
		if lb.Token() != 2 {
			t.Fatalf("successor token %d, want 2", lb.Token())
		}
	})
}

func TestLease_CloseReleasesAndAWatchingManagerTakesOverAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := newFakeStore()
		a, b := newManager(t, store, "a"), newManager(t, store, "b")
		la, lb := register(t, a, "maintenance"), register(t, b, "maintenance")
		start(t, a)
		synctest.Wait()
		start(t, b)
		synctest.Wait()
		time.Sleep(testRenew / 2)
		closed := time.Now()
		if err := la.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		if la.IsHeld() {
			t.Fatal("IsHeld after Close")
		}
		synctest.Wait()
		if !lb.IsHeld() {
			t.Fatal("the waiting manager did not take the released role at once")
		}
		if time.Since(closed) != 0 {
			t.Fatalf("takeover took %v of fake time, want none", time.Since(closed))
		}
		if _, ok := a.Registry().Lease("maintenance"); ok {
			t.Fatal("a closed lease is still registered")
		}
	})
}

// A takeover that the store committed while Close ran must be released by
// Close: a successor takes the role at once instead of waiting
// LeaseDuration. Close lets the heartbeat in flight finish (cancelling it
// would not stop the store from committing it, only hide the answer), and
// when the answer never comes it reads the row.
func TestManager_CloseReleasesATermWonByTheHeartbeatInFlight(t *testing.T) {
	for name, lose := range map[string]func(*fakeStore){
		"the takeover commits after Close began": func(s *fakeStore) { s.slowStatement("a", testRenew/2) },
		"the takeover's answer is lost":          func(s *fakeStore) { s.loseReply("a") },
	} {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				store := newFakeStore()
				a := newManager(t, store, "a")
				register(t, a, "maintenance")
				lose(store) // for the first heartbeat, which takes the role
				start(t, a)
				synctest.Wait() // a's heartbeat is in flight
				if err := a.Close(context.Background()); err != nil {
					t.Fatalf("Close: %v", err)
				}
				time.Sleep(testRenew) // whatever a's heartbeat did is done
				b := newManager(t, store, "b")
				lb := register(t, b, "maintenance")
				start(t, b)
				synctest.Wait()
				if !lb.IsHeld() {
					t.Fatal("the role a won while closing was not released: the successor has to wait for it to expire")
				}
				if lb.Token() != 2 {
					t.Fatalf("successor token %d, want the term after a's (2)", lb.Token())
				}
			})
		})
	}
}

// Close waits for a heartbeat in flight only as long as its ctx allows.
func TestManager_CloseWaitsForTheHeartbeatInFlightNoLongerThanItsContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := newFakeStore()
		a := newManager(t, store, "a")
		register(t, a, "maintenance")
		store.blackhole("a", 1)
		start(t, a)
		synctest.Wait()
		began := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), testRenew/4)
		defer cancel()
		a.Close(ctx)
		if took := time.Since(began); took != testRenew/4 {
			t.Fatalf("Close took %v, want its context's %v", took, testRenew/4)
		}
	})
}

// The same holds for closing one lease while a heartbeat that carries it is
// in flight.
func TestLease_CloseReleasesATermWonByTheHeartbeatInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := newFakeStore()
		a := newManager(t, store, "a")
		la := register(t, a, "maintenance")
		store.loseReply("a")
		start(t, a)
		synctest.Wait()
		if err := la.Close(context.Background()); err != nil {
			t.Fatalf("Close: %v", err)
		}
		b := newManager(t, store, "b")
		lb := register(t, b, "maintenance")
		start(t, b)
		synctest.Wait()
		if !lb.IsHeld() || lb.Token() != 2 {
			t.Fatalf("successor held=%v token=%d, want the next term (2) at once", lb.IsHeld(), lb.Token())
		}
	})
}

func TestManager_CloseReleasesEveryRole(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := newFakeStore()
		a := newManager(t, store, "a")
		register(t, a, "x")
		register(t, a, "y")
		start(t, a)
		synctest.Wait()
		if err := a.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		b := newManager(t, store, "b")
		lx, ly := register(t, b, "x"), register(t, b, "y")
		start(t, b)
		synctest.Wait()
		if !lx.IsHeld() || !ly.IsHeld() {
			t.Fatal("roles were not free right after the holder's Close")
		}
		if lx.Token() != 2 {
			t.Fatalf("token after a release %d, want 2 (the next term)", lx.Token())
		}
		if _, err := a.Register("z"); !errors.Is(err, lease.ErrClosed) {
			t.Fatalf("Register after Close: %v", err)
		}
	})
}

func TestLease_RenewalKeepsTheTokenAndTakeoverBumpsIt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := newFakeStore()
		a := newManager(t, store, "a")
		la := register(t, a, "r")
		start(t, a)
		synctest.Wait()
		time.Sleep(5 * testRenew)
		if la.Token() != 1 {
			t.Fatalf("token after renewals %d, want 1", la.Token())
		}
		store.cut("a", true)
		time.Sleep(testLease + testRenew)
		store.cut("a", false)
		time.Sleep(testRenew)
		synctest.Wait()
		if !la.IsHeld() || la.Token() != 2 {
			t.Fatalf("after its own lease expired and it took the role again: held=%v token=%d, want a new term (2)", la.IsHeld(), la.Token())
		}
	})
}

func TestNewManager_RejectsUnsafeTimings(t *testing.T) {
	store := newFakeStore()
	for name, cfg := range map[string]lease.Config{
		"lease not above renew+margin": {Store: store, LeaseDuration: 5 * time.Second, RenewInterval: 3 * time.Second, HeldSafetyMargin: 2 * time.Second},
		// Above RenewInterval + HeldSafetyMargin, but one failed heartbeat
		// would end the trust before the next could renew.
		"no room for one failed heartbeat": {Store: store, LeaseDuration: 15 * time.Second, RenewInterval: 7 * time.Second, HeldSafetyMargin: 2 * time.Second},
		"exactly two intervals of trust":   {Store: store, LeaseDuration: 12 * time.Second, RenewInterval: 5 * time.Second, HeldSafetyMargin: 2 * time.Second},
		"negative renew":                   {Store: store, RenewInterval: -time.Second},
		"negative margin":                  {Store: store, HeldSafetyMargin: -time.Second},
		"no store":                         {},
		"instance id with NUL":             {Store: store, InstanceID: "a\x00b"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := lease.NewManager(cfg)
			if !errors.Is(err, lease.ErrInvalidConfig) {
				t.Fatalf("err = %v, want ErrInvalidConfig", err)
			}
		})
	}
	_, err := lease.NewManager(lease.Config{Store: store, LeaseDuration: 15 * time.Second, RenewInterval: 7 * time.Second, HeldSafetyMargin: 2 * time.Second})
	for _, field := range []string{"LeaseDuration", "RenewInterval", "HeldSafetyMargin"} {
		if !strings.Contains(err.Error(), field) {
			t.Errorf("error %q does not name %s", err, field)
		}
	}
	// Just over two intervals of trust is enough.
	m, err := lease.NewManager(lease.Config{Store: store, LeaseDuration: 12*time.Second + time.Millisecond, RenewInterval: 5 * time.Second, HeldSafetyMargin: 2 * time.Second})
	if err != nil {
		t.Fatalf("LeaseDuration − HeldSafetyMargin just above 2 × RenewInterval: %v", err)
	}
	m.Close(context.Background())
}

func TestRegister_RejectsBadAndDuplicateRolesAndStartsNothing(t *testing.T) {
	store := newFakeStore()
	m, err := lease.NewManager(lease.Config{Store: store, InstanceID: "a"})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close(context.Background())
	for what, role := range map[string]string{"empty": "", "129 bytes": strings.Repeat("r", 129)} {
		if _, err := m.Register(role); !errors.Is(err, lease.ErrInvalidRole) {
			t.Errorf("%s role: err = %v, want ErrInvalidRole", what, err)
		}
	}
	if _, err := m.Register(strings.Repeat("r", 128)); err != nil {
		t.Errorf("a 128-byte role: %v", err)
	}
	if _, err := m.Register("dup"); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Register("dup"); !errors.Is(err, lease.ErrDuplicateRole) {
		t.Errorf("duplicate role: err = %v, want ErrDuplicateRole", err)
	}
	// A partition whose generated names would overflow registers nothing.
	long := strings.Repeat("p", 128-len(":partition-9"))
	if _, err := m.RegisterPartition(long, 10); err != nil {
		t.Fatalf("names up to exactly 128 bytes: %v", err)
	}
	if _, err := m.RegisterPartition(long+"x", 10); !errors.Is(err, lease.ErrInvalidRole) {
		t.Errorf("overflowing partition: err = %v, want ErrInvalidRole", err)
	}
	if _, ok := m.Registry().Lease(long + "x:partition-0"); ok {
		t.Error("an invalid partition registered some of its roles")
	}
	// A partition clashing with a registered role registers none of its roles.
	if _, err := m.Register("clash:partition-3"); err != nil {
		t.Fatal(err)
	}
	if _, err := m.RegisterPartition("clash", 8); !errors.Is(err, lease.ErrDuplicateRole) {
		t.Errorf("clashing partition: err = %v, want ErrDuplicateRole", err)
	}
	if _, ok := m.Registry().Lease("clash:partition-0"); ok {
		t.Error("a clashing partition registered some of its roles")
	}
	if n := store.heartbeats("a"); n != 0 {
		t.Errorf("%d heartbeats before Start", n)
	}
	if _, err := m.RegisterPartition("zero", 0); !errors.Is(err, lease.ErrInvalidConfig) {
		t.Errorf("zero partitions: err = %v", err)
	}
}

// Run blocks until its ctx ends; then it releases the roles it holds, so a
// waiting manager takes over at once, and returns.
func TestManager_RunReleasesEverythingWhenItsContextEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := newFakeStore()
		a, b := newManager(t, store, "a"), newManager(t, store, "b")
		la, lb := register(t, a, "maintenance"), register(t, b, "maintenance")
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- a.Run(ctx) }()
		synctest.Wait()
		start(t, b)
		synctest.Wait()
		if !la.IsHeld() {
			t.Fatal("the first manager does not hold the free role")
		}
		select {
		case err := <-done:
			t.Fatalf("Run returned %v before its ctx ended", err)
		default:
		}
		time.Sleep(testRenew / 2)
		stopped := time.Now()
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("Run = %v, want nil after its ctx ended", err)
		}
		if la.IsHeld() {
			t.Fatal("IsHeld after Run returned")
		}
		synctest.Wait()
		if !lb.IsHeld() || time.Since(stopped) != 0 {
			t.Fatalf("successor holds: %v, after %v of fake time; want at once", lb.IsHeld(), time.Since(stopped))
		}
	})
}

// A manager runs once: Run again is ErrRunning, Run after Close is
// ErrClosed, and Close makes a running Run return.
func TestManager_RunsOnceAndCloseEndsRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newManager(t, newFakeStore(), "a")
		done := make(chan error, 1)
		go func() { done <- m.Run(context.Background()) }()
		synctest.Wait()
		if err := m.Run(context.Background()); !errors.Is(err, lease.ErrRunning) {
			t.Fatalf("second Run = %v, want ErrRunning", err)
		}
		if err := m.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			t.Fatalf("Run = %v after Close, want nil", err)
		}
		closed := newManager(t, newFakeStore(), "b")
		if err := closed.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		if err := closed.Run(context.Background()); !errors.Is(err, lease.ErrClosed) {
			t.Fatalf("Run after Close = %v, want ErrClosed", err)
		}
	})
}
