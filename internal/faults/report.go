package faults

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"
)

// event is one thing a child reports: a change of belief about a role, a
// delivery, a commit, a completion. At is the wall clock of the moment the
// child observed it, in Unix nanoseconds; every child shares the machine's
// clock.
type event struct {
	Child string `json:"child"`
	Kind  string `json:"kind"`
	At    int64  `json:"at"`
	// Role and Held/Token: a change of what the child believes of a role.
	// Since is the last moment the previous belief was observed.
	Role  string `json:"role,omitempty"`
	Held  bool   `json:"held,omitempty"`
	Token uint64 `json:"token,omitempty"`
	Since int64  `json:"since,omitempty"`
	// ID and XID: an outbox entry or a work row.
	ID  string `json:"id,omitempty"`
	XID uint64 `json:"xid,omitempty"`
}

// Event kinds.
const (
	kindBelief    = "belief"    // Role, Held, Token, Since
	kindCommitted = "committed" // ID: an entry whose transaction committed
	kindRolled    = "rolled"    // ID: an entry whose transaction rolled back
	kindDelivered = "delivered" // ID, XID, Token: the destination accepted it (At: when it was sent)
	kindFenced    = "fenced"    // Token: the destination refused a run under this token
	kindGranted   = "granted"   // Token: a driver child became leader (Since: its Acquire began)
	kindReady     = "ready"     // the child is up
)

// collector receives the children's reports on a loopback listener.
type collector struct {
	ln net.Listener
	wg sync.WaitGroup

	mu     sync.Mutex
	events []event
	conns  []net.Conn
	// granted is the highest token of the grants reported so far, which
	// the outbox's fencing destination refuses to go below.
	granted uint64
}

func newCollector(t *testing.T) *collector {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := &collector{ln: ln}
	c.wg.Add(1)
	go c.accept()
	t.Cleanup(c.close)
	return c
}

func (c *collector) addr() string { return c.ln.Addr().String() }

func (c *collector) accept() {
	defer c.wg.Done()
	for {
		conn, err := c.ln.Accept()
		if err != nil {
			return
		}
		c.mu.Lock()
		c.conns = append(c.conns, conn)
		c.mu.Unlock()
		c.wg.Add(1)
		go c.read(conn)
	}
}

func (c *collector) read(conn net.Conn) {
	defer c.wg.Done()
	sc := bufio.NewScanner(conn)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var e event
		if json.Unmarshal(sc.Bytes(), &e) != nil {
			continue
		}
		c.mu.Lock()
		c.events = append(c.events, e)
		if e.Kind == kindGranted {
			c.granted = max(c.granted, e.Token)
		}
		c.mu.Unlock()
	}
}

func (c *collector) close() {
	c.ln.Close()
	c.mu.Lock()
	for _, conn := range c.conns {
		conn.Close()
	}
	c.mu.Unlock()
	c.wg.Wait()
}

// snapshot returns the events so far, in the order they arrived.
func (c *collector) snapshot() []event {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.events)
}

// waitFor polls the events until ok holds or timeout passes.
func (c *collector) waitFor(timeout time.Duration, ok func([]event) bool) bool {
	deadline := time.Now().Add(timeout)
	for {
		if ok(c.snapshot()) {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// reporter is a child's side: events written synchronously, so that what a
// child reported before it was killed has reached the kernel, and with it
// the parent.
type reporter struct {
	child string
	mu    sync.Mutex
	conn  net.Conn
	enc   *json.Encoder
}

func dialReporter(addr, child string) *reporter {
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		fmt.Fprintf(os.Stderr, "child %s: report to %s: %v\n", child, addr, err)
		os.Exit(3)
	}
	return &reporter{child: child, conn: conn, enc: json.NewEncoder(conn)}
}

func (r *reporter) send(e event) {
	e.Child = r.child
	if e.At == 0 {
		e.At = time.Now().UnixNano()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.enc.Encode(e); err != nil {
		// The parent is gone: nothing left to report to.
		os.Exit(3)
	}
}

func (r *reporter) close() { r.conn.Close() }

// childFlags are the flags every child role takes, its name and where to
// report, beside the role's own.
type childFlags struct {
	*flag.FlagSet
	name, report *string
}

func newChildFlags(role string) childFlags {
	fs := flag.NewFlagSet(role, flag.ContinueOnError)
	return childFlags{fs, fs.String("name", "", "child name"), fs.String("report", "", "collector address")}
}

// start parses args and connects the reporter. The context ends at
// SIGTERM; done closes both, when the child returns.
func (f childFlags) start(args []string) (rep *reporter, ctx context.Context, done func(), err error) {
	if err := f.Parse(args); err != nil {
		return nil, nil, nil, err
	}
	rep = dialReporter(*f.report, *f.name)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	return rep, ctx, func() { stop(); rep.close() }, nil
}
