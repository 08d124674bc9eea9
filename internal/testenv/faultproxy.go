package testenv

import (
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// FaultMode is what a FaultProxy does with the traffic through it.
type FaultMode int32

const (
	// Pass forwards bytes both ways.
	Pass FaultMode = iota
	// Blackhole keeps every connection open, accepts new ones, and forwards
	// nothing: what a peer behind a dropped route or a full firewall table
	// sees. Bytes read meanwhile are discarded, as the network would.
	Blackhole
	// Reset closes every connection with a TCP reset, and resets new ones
	// as soon as they are accepted.
	Reset
)

func (m FaultMode) String() string {
	switch m {
	case Blackhole:
		return "blackhole"
	case Reset:
		return "reset"
	default:
		return "pass"
	}
}

// FaultProxy is a loopback TCP proxy in front of one server whose behaviour
// can be switched while connections are open. Point a client at Addr
// instead of the server, then call SetMode to cut it off.
type FaultProxy struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	mode  FaultMode
	conns map[*proxiedConn]struct{}
	wg    sync.WaitGroup
}

// proxiedConn is one client connection and its upstream.
type proxiedConn struct {
	client, server net.Conn
}

// NewFaultProxy listens on a free port of 127.0.0.1 and forwards to target
// (host:port) in Pass mode. It is closed, with its connections, when the
// test ends.
func NewFaultProxy(t testing.TB, target string) *FaultProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("testenv: fault proxy: %v", err)
	}
	p := &FaultProxy{ln: ln, target: target, conns: map[*proxiedConn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.Close)
	return p
}

// Addr is the proxy's host:port.
func (p *FaultProxy) Addr() string { return p.ln.Addr().String() }

// Mode is the current mode.
func (p *FaultProxy) Mode() FaultMode {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mode
}

// SetMode switches the proxy. Reset drops every open connection at once;
// Blackhole stops forwarding on open connections as well as new ones.
func (p *FaultProxy) SetMode(m FaultMode) {
	p.mu.Lock()
	p.mode = m
	var drop []*proxiedConn
	if m == Reset {
		for c := range p.conns {
			drop = append(drop, c)
			delete(p.conns, c)
		}
	}
	p.mu.Unlock()
	for _, c := range drop {
		c.reset()
	}
}

// Close stops accepting and closes every connection.
func (p *FaultProxy) Close() {
	p.ln.Close()
	p.mu.Lock()
	conns := p.conns
	p.conns = map[*proxiedConn]struct{}{}
	p.mu.Unlock()
	for c := range conns {
		c.reset()
	}
	p.wg.Wait()
}

func (p *FaultProxy) accept() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		if p.Mode() == Reset {
			resetConn(client)
			continue
		}
		server, err := net.DialTimeout("tcp", p.target, 5*time.Second)
		if err != nil {
			resetConn(client)
			continue
		}
		c := &proxiedConn{client: client, server: server}
		p.mu.Lock()
		p.conns[c] = struct{}{}
		p.mu.Unlock()
		p.wg.Add(2)
		go p.pipe(c, server, client)
		go p.pipe(c, client, server)
	}
}

// pipe copies src to dst while the mode is Pass, discards while it is
// Blackhole, and ends when either side closes.
func (p *FaultProxy) pipe(c *proxiedConn, dst, src net.Conn) {
	defer p.wg.Done()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && p.Mode() == Pass {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				err = werr
			}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				c.reset()
			} else {
				c.close()
			}
			p.mu.Lock()
			delete(p.conns, c)
			p.mu.Unlock()
			return
		}
	}
}

func (c *proxiedConn) reset() {
	resetConn(c.client)
	resetConn(c.server)
}

func (c *proxiedConn) close() {
	c.client.Close()
	c.server.Close()
}

// resetConn closes conn with a TCP RST instead of a FIN.
func resetConn(conn net.Conn) {
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	conn.Close()
}
