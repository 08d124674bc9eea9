// Package member runs throwaway etcd members (go.etcd.io/etcd/server/v3/embed)
// on loopback, for the module's tests and its demo command: data in a
// directory of the caller's, no fsync, warnings only. Each member is a
// child process that re-executes the caller's binary (Main is its main), so
// that a kill of a member is a real one, and so that what a member leaves
// running when it stops (its peers' connections linger until their read
// deadline) ends with its process. The tests start members through
// internal/etcdtest; the demo command starts its cluster with Start.
package member

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// Spec is one member's place in a cluster.
type Spec struct {
	Name       string
	Dir        string // its data directory
	ClientPort int
	PeerPort   int
}

// ClientURL is where the member serves clients.
func (s Spec) ClientURL() string { return "http://127.0.0.1:" + strconv.Itoa(s.ClientPort) }

// PeerURL is where the member talks to the others.
func (s Spec) PeerURL() string { return "http://127.0.0.1:" + strconv.Itoa(s.PeerPort) }

// Plan chooses free loopback ports and a data directory under dir for n
// members, and returns them with the cluster's initial-cluster string.
func Plan(n int, dir string) ([]Spec, string, error) {
	// Every port stays taken until all are chosen: a port just closed may
	// be handed out again, and two members on one port never start.
	var held []net.Listener
	defer func() {
		for _, ln := range held {
			ln.Close()
		}
	}()
	freePort := func() (int, error) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		held = append(held, ln)
		return ln.Addr().(*net.TCPAddr).Port, nil
	}
	specs := make([]Spec, n)
	var initial []string
	for i := range specs {
		cp, err := freePort()
		if err != nil {
			return nil, "", err
		}
		pp, err := freePort()
		if err != nil {
			return nil, "", err
		}
		name := "m" + strconv.Itoa(i)
		specs[i] = Spec{Name: name, Dir: dir + "/" + name, ClientPort: cp, PeerPort: pp}
		initial = append(initial, name+"="+specs[i].PeerURL())
	}
	return specs, strings.Join(initial, ","), nil
}

// Timing is a cluster's raft timing: a heartbeat tick, and an election
// timeout that is a whole number of ticks.
type Timing struct {
	TickMs, ElectionMs uint
}

// MinLeaseTTL is the shortest lease members with this timing grant, as
// etcd computes it: 1.5 election timeouts counted in whole ticks, rounded
// up to whole seconds.
func (t Timing) MinLeaseTTL() time.Duration {
	ms := 3 * (t.ElectionMs / t.TickMs) / 2 * t.TickMs
	return time.Duration((ms+999)/1000) * time.Second
}

// config is the embed configuration of member s of a new cluster: initial
// lists every member (Plan's string), token names the cluster. Logs go to
// stderr at warn level.
func config(s Spec, initial, token string, t Timing) (*embed.Config, error) {
	cu, err := url.Parse(s.ClientURL())
	if err != nil {
		return nil, err
	}
	pu, err := url.Parse(s.PeerURL())
	if err != nil {
		return nil, err
	}
	cfg := embed.NewConfig()
	cfg.Name = s.Name
	cfg.Dir = s.Dir
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*cu}, []url.URL{*cu}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*pu}, []url.URL{*pu}
	cfg.InitialCluster = initial
	cfg.InitialClusterToken = "baton-" + token
	cfg.ClusterState = embed.ClusterStateFlagNew
	cfg.TickMs, cfg.ElectionMs = t.TickMs, t.ElectionMs
	// Throwaway data: a crash may lose it, nobody minds.
	cfg.UnsafeNoFsync = true
	cfg.LogLevel = "warn"
	cfg.LogOutputs = []string{"stderr"}
	return cfg, nil
}

// Args are the flags of Main for member s of a new cluster: initial lists
// every member (Plan's string), token names the cluster.
func Args(s Spec, initial, token string, t Timing) []string {
	return []string{"-name", s.Name, "-dir", s.Dir,
		"-client-port", strconv.Itoa(s.ClientPort), "-peer-port", strconv.Itoa(s.PeerPort),
		"-cluster", initial, "-token", token,
		"-tick-ms", strconv.FormatUint(uint64(t.TickMs), 10), "-election-ms", strconv.FormatUint(uint64(t.ElectionMs), 10)}
}

// Main runs one member with the flags Args made, until SIGTERM or SIGINT,
// or, with -exit-on-eof, until its standard input ends (its parent is gone),
// and returns the exit status.
func Main(args []string) int {
	fs := flag.NewFlagSet("etcd-member", flag.ContinueOnError)
	var (
		s     Spec
		t     Timing
		eofOK bool
	)
	fs.StringVar(&s.Name, "name", "", "member name")
	fs.StringVar(&s.Dir, "dir", "", "data directory")
	fs.IntVar(&s.ClientPort, "client-port", 0, "client port on 127.0.0.1")
	fs.IntVar(&s.PeerPort, "peer-port", 0, "peer port on 127.0.0.1")
	initial := fs.String("cluster", "", "initial cluster")
	token := fs.String("token", "", "initial cluster token")
	fs.UintVar(&t.TickMs, "tick-ms", 100, "heartbeat interval")
	fs.UintVar(&t.ElectionMs, "election-ms", 1000, "election timeout")
	fs.BoolVar(&eofOK, "exit-on-eof", false, "stop when standard input ends")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	cfg, err := config(s, *initial, *token, t)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if eofOK {
		go func() { // ends with the process
			_, _ = io.Copy(io.Discard, os.Stdin)
			stop()
		}()
	}
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "start etcd:", err)
		return 1
	}
	defer e.Close()
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		fmt.Fprintln(os.Stderr, "etcd:", err)
		return 1
	case <-ctx.Done():
		return 0
	}
	select {
	case err := <-e.Err():
		fmt.Fprintln(os.Stderr, "etcd:", err)
		return 1
	case <-ctx.Done():
		return 0
	}
}

// EnvChild marks a process Start started as a member: RunIfChild runs it.
const EnvChild = "BATON_ETCD_MEMBER"

// RunIfChild runs Main and exits when this process is a member Start
// started; otherwise it returns at once. Call it first thing in main (and
// in TestMain, for a test that starts a cluster).
func RunIfChild() {
	if os.Getenv(EnvChild) == "1" {
		os.Exit(Main(os.Args[1:]))
	}
}

// Cluster is a throwaway cluster of member processes started by Start.
type Cluster struct {
	dir     string
	specs   []Spec
	members []*process
}

// process is one member: its command, its standard input (closing it stops
// the member), what it printed, and its end.
type process struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	output *bytes.Buffer
	exited chan struct{}
}

// Start starts an n-member cluster, each member a child process of this
// binary (which must call RunIfChild), with its data in a new temporary
// directory, and waits until the cluster answers (or ctx ends). Close stops
// it and removes the data. A member also stops when this process dies: its
// standard input ends.
func Start(ctx context.Context, n int, t Timing) (*Cluster, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "baton-etcd-")
	if err != nil {
		return nil, err
	}
	c := &Cluster{dir: dir}
	fail := func(err error) (*Cluster, error) {
		out := c.output()
		_ = c.Close()
		if out != "" {
			err = fmt.Errorf("%w; the members said:\n%s", err, out)
		}
		return nil, err
	}
	specs, initial, err := Plan(n, dir)
	if err != nil {
		return fail(err)
	}
	c.specs = specs
	token := "demo-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	for _, s := range specs {
		p, err := startProcess(self, Args(s, initial, token, t))
		if err != nil {
			return fail(fmt.Errorf("start etcd member %s: %w", s.Name, err))
		}
		c.members = append(c.members, p)
	}
	if err := c.waitReady(ctx); err != nil {
		return fail(err)
	}
	return c, nil
}

func startProcess(self string, args []string) (*process, error) {
	p := &process{output: &bytes.Buffer{}, exited: make(chan struct{})}
	p.cmd = exec.Command(self, append(args, "-exit-on-eof")...)
	p.cmd.Env = append(os.Environ(), EnvChild+"=1")
	w := &syncWriter{b: p.output}
	p.cmd.Stdout, p.cmd.Stderr = w, w
	stdin, err := p.cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	p.stdin = stdin
	if err := p.cmd.Start(); err != nil {
		return nil, err
	}
	go func() { // ends when the member does; Close waits for it
		_ = p.cmd.Wait()
		close(p.exited)
	}()
	return p, nil
}

// readyTimeout bounds how long Start waits for a new cluster.
const readyTimeout = 90 * time.Second

// waitReady waits until the cluster is healthy, or a member exits, or ctx
// ends.
func (c *Cluster) waitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	var watchers sync.WaitGroup
	defer watchers.Wait()
	defer cancel() // before the Wait: it stops the watchers
	var exited atomic.Bool
	for _, p := range c.members {
		watchers.Go(func() {
			select {
			case <-p.exited:
				exited.Store(true)
				cancel()
			case <-ctx.Done():
			}
		})
	}
	err := WaitHealthy(ctx, c.Endpoints())
	if exited.Load() {
		return errors.New("an etcd member exited before the cluster was ready")
	}
	return err
}

// WaitHealthy waits until every member of eps answers with a leader and a
// linearizable read succeeds, or ctx ends.
func WaitHealthy(ctx context.Context, eps []string) error {
	cli, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return err
	}
	defer cli.Close()
	for {
		err := healthy(ctx, cli, eps)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the cluster %v is not healthy: %w", eps, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func healthy(ctx context.Context, cli *clientv3.Client, eps []string) error {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	for _, ep := range eps {
		st, err := cli.Status(ctx, ep)
		if err != nil {
			return err
		}
		if st.Leader == 0 {
			return fmt.Errorf("%s has no leader", ep)
		}
	}
	_, err := cli.Get(ctx, "baton-ready")
	return err
}

// Endpoints are the members' client URLs.
func (c *Cluster) Endpoints() []string {
	eps := make([]string, len(c.specs))
	for i, s := range c.specs {
		eps[i] = s.ClientURL()
	}
	return eps
}

func (c *Cluster) output() string {
	var b strings.Builder
	for i, p := range c.members {
		if out := p.String(); out != "" {
			fmt.Fprintf(&b, "%s: %s\n", c.specs[i].Name, strings.TrimSpace(out))
		}
	}
	return b.String()
}

func (p *process) String() string {
	w := p.cmd.Stderr.(*syncWriter)
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

// Close kills the members (their data is thrown away: a graceful stop
// would only wait for etcd's request timeout), waits for them, and removes
// their data.
func (c *Cluster) Close() error {
	for _, p := range c.members {
		_ = p.cmd.Process.Kill()
		_ = p.stdin.Close()
	}
	for _, p := range c.members {
		<-p.exited
	}
	c.members = nil
	if err := os.RemoveAll(c.dir); err != nil {
		return errors.New("remove the etcd members' data: " + err.Error())
	}
	return nil
}

// syncWriter is a buffer two pipes copy into.
type syncWriter struct {
	mu sync.Mutex
	b  *bytes.Buffer
}

func (w *syncWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}
