package benchkit

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// CPUUse is what one run cost in CPU, per process, in core-seconds per
// second of the run's wall time: 1.0 is one core busy for the whole run.
type CPUUse struct {
	// WALSender is the WAL sender serving the slot; WALSenderPID is 0 when
	// none served it at the run's end (the walk's runs).
	WALSender    float64
	WALSenderPID int
	// Server is the rest of the server: the postmaster and its other
	// children, those that exited during the run included.
	Server float64
	// Bench is this process.
	Bench float64
}

// ServerCPU reads the CPU time of one PostgreSQL server's processes from
// /proc, which only works when the server runs on this machine.
type ServerCPU struct {
	pool       *pgxpool.Pool
	slot       string
	postmaster int
	pmStart    uint64  // its start time in clock ticks after boot, against a reused pid
	tick       float64 // clock ticks per second
}

// NewServerCPU finds pool's server among this machine's processes: the
// parent of the session's own backend, which must be the process that
// started when the server says its postmaster did. The error says why the
// server's processes cannot be read (no /proc, a remote server).
func NewServerCPU(ctx context.Context, pool *pgxpool.Pool, slot string) (*ServerCPU, error) {
	tick, err := clockTick()
	if err != nil {
		return nil, err
	}
	boot, err := bootTime()
	if err != nil {
		return nil, err
	}
	var (
		backend int32
		started time.Time
	)
	if err := pool.QueryRow(ctx, "SELECT pg_backend_pid(), pg_postmaster_start_time()").Scan(&backend, &started); err != nil {
		return nil, fmt.Errorf("benchkit: the server's backend pid: %w", err)
	}
	be, err := readProcStat(strconv.Itoa(int(backend)))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("benchkit: the server's backend %d is not a process of this machine (a remote server?)", backend)
	}
	if err != nil {
		return nil, err
	}
	pm, err := readProcStat(strconv.Itoa(be.PPID))
	if err != nil {
		return nil, fmt.Errorf("benchkit: the parent %d of backend %d: %w", be.PPID, backend, err)
	}
	// The server's postmaster start time is taken just after its process
	// starts; a local process of the same pid that started at another time
	// is not the server's (a remote server, another pid namespace).
	local := boot.Add(time.Duration(float64(pm.StartTime) / tick * float64(time.Second)))
	if d := local.Sub(started).Abs(); d > 10*time.Second {
		return nil, fmt.Errorf("benchkit: process %d of this machine started at %s, the server's postmaster at %s: "+
			"not the server (a remote server or another pid namespace?)", pm.PID, local.Format(time.RFC3339), started.Format(time.RFC3339))
	}
	return &ServerCPU{pool: pool, slot: slot, postmaster: pm.PID, pmStart: pm.StartTime, tick: tick}, nil
}

// Tick is the clock ticks per second of /proc's CPU times.
func (s *ServerCPU) Tick() float64 { return s.tick }

// Start begins measuring; end, called while the measured work still runs
// (the WAL sender exits with its driver), returns the CPU use since Start,
// or nil when a reading failed: a run is never failed for its CPU figures.
// A nil ServerCPU measures nothing.
func (s *ServerCPU) Start() (end func(ctx context.Context) *CPUUse) {
	if s == nil {
		return func(context.Context) *CPUUse { return nil }
	}
	start, err := s.snapshot()
	return func(ctx context.Context) *CPUUse {
		if err != nil {
			return nil
		}
		fin, err := s.snapshot()
		if err != nil {
			return nil
		}
		// The slot's reader after the reading, so that the query costs
		// the run nothing; its WAL sender still runs.
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		var pid *int32
		err = s.pool.QueryRow(ctx, "SELECT active_pid FROM pg_replication_slots WHERE slot_name = $1", s.slot).Scan(&pid)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		wal := 0
		if pid != nil {
			wal = int(*pid)
		}
		return cpuUse(start, fin, wal, s.tick)
	}
}

// cpuSnapshot is one reading of the CPU times, in clock ticks.
type cpuSnapshot struct {
	at   time.Time
	self uint64
	// server is the postmaster's own time and its reaped children's, and
	// that of its children alive now: what the whole server has used.
	server   uint64
	children map[int]uint64 // alive now, by pid
}

func (s *ServerCPU) snapshot() (cpuSnapshot, error) {
	snap := cpuSnapshot{at: time.Now(), children: map[int]uint64{}}
	self, err := readProcStat("self")
	if err != nil {
		return snap, err
	}
	snap.self = self.UTime + self.STime
	pm, err := readProcStat(strconv.Itoa(s.postmaster))
	if err != nil {
		return snap, err
	}
	if pm.StartTime != s.pmStart {
		return snap, fmt.Errorf("benchkit: the postmaster %d has exited", s.postmaster)
	}
	snap.server = pm.UTime + pm.STime + pm.CUTime + pm.CSTime
	procs, err := os.ReadDir("/proc")
	if err != nil {
		return snap, fmt.Errorf("benchkit: list processes: %w", err)
	}
	for _, p := range procs {
		if _, err := strconv.Atoi(p.Name()); err != nil {
			continue
		}
		st, err := readProcStat(p.Name())
		if err != nil || st.PPID != s.postmaster {
			continue // gone since the listing, or not the server's
		}
		snap.children[st.PID] = st.UTime + st.STime
		snap.server += st.UTime + st.STime
	}
	return snap, nil
}

// cpuUse is the use between two snapshots, wal being the WAL sender's pid
// at the end (0 for none). A child that exited before the end is counted
// through the postmaster's reaped children's time.
func cpuUse(start, end cpuSnapshot, wal int, tick float64) *CPUUse {
	wall := end.at.Sub(start.at).Seconds()
	if wall <= 0 {
		return nil
	}
	rate := func(from, to uint64) float64 {
		if to < from { // a child exited but not yet reaped
			return 0
		}
		return float64(to-from) / tick / wall
	}
	u := &CPUUse{Bench: rate(start.self, end.self)}
	var walTicks uint64
	if to, ok := end.children[wal]; ok && wal != 0 {
		from := start.children[wal] // 0 when it started during the run
		if to >= from {
			walTicks = to - from
		}
		u.WALSenderPID, u.WALSender = wal, rate(from, to)
	}
	u.Server = rate(start.server+walTicks, end.server)
	return u
}

// procStat is what the CPU figures need of /proc/<pid>/stat; times are in
// clock ticks.
type procStat struct {
	PID, PPID      int
	Comm           string
	UTime, STime   uint64
	CUTime, CSTime uint64 // of the children it has waited for
	StartTime      uint64 // after boot
}

func readProcStat(pid string) (procStat, error) {
	b, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return procStat{}, fmt.Errorf("benchkit: read /proc/%s/stat: %w", pid, err)
	}
	return parseProcStat(b)
}

// parseProcStat reads one /proc/<pid>/stat line (proc(5)): the pid, the
// command name in parentheses, then space-separated fields. The name may
// hold spaces and parentheses itself, so it ends at the last ')'.
func parseProcStat(b []byte) (procStat, error) {
	line := strings.TrimSpace(string(b))
	open, end := strings.IndexByte(line, '('), strings.LastIndexByte(line, ')')
	if open < 1 || end < open {
		return procStat{}, fmt.Errorf("benchkit: /proc stat line %.40q: no (command name)", line)
	}
	var st procStat
	var err error
	if st.PID, err = strconv.Atoi(strings.TrimSpace(line[:open])); err != nil {
		return procStat{}, fmt.Errorf("benchkit: /proc stat line %.40q: pid: %w", line, err)
	}
	st.Comm = line[open+1 : end]
	// f[0] is field 3 of proc(5), the state: field n is f[n-3].
	f := strings.Fields(line[end+1:])
	if len(f) < 20 {
		return procStat{}, fmt.Errorf("benchkit: /proc stat line %.40q: %d fields after the name; want at least 20", line, len(f))
	}
	if st.PPID, err = strconv.Atoi(f[4-3]); err != nil {
		return procStat{}, fmt.Errorf("benchkit: /proc stat of %d: ppid: %w", st.PID, err)
	}
	for _, v := range []struct {
		field int
		to    *uint64
	}{{14, &st.UTime}, {15, &st.STime}, {16, &st.CUTime}, {17, &st.CSTime}, {22, &st.StartTime}} {
		// cutime and cstime are signed in the kernel's format; never
		// negative in practice.
		n, err := strconv.ParseInt(f[v.field-3], 10, 64)
		if err != nil || n < 0 {
			return procStat{}, fmt.Errorf("benchkit: /proc stat of %d: field %d is %q, not a tick count", st.PID, v.field, f[v.field-3])
		}
		*v.to = uint64(n)
	}
	return st, nil
}

// clockTick is the clock ticks per second of /proc's times: the AT_CLKTCK
// entry of this process's auxiliary vector, where the C library's
// sysconf(_SC_CLK_TCK), and so getconf CLK_TCK, reads it.
func clockTick() (float64, error) {
	b, err := os.ReadFile("/proc/self/auxv")
	if err != nil {
		return 0, fmt.Errorf("benchkit: the clock tick rate: %w", err)
	}
	return auxvClockTick(b)
}

func auxvClockTick(b []byte) (float64, error) {
	const atNull, atClkTck = 0, 17
	word := strconv.IntSize / 8 // an auxv entry is two words
	for len(b) >= 2*word {
		var k, v uint64
		if word == 8 {
			k, v = binary.NativeEndian.Uint64(b), binary.NativeEndian.Uint64(b[8:])
		} else {
			k, v = uint64(binary.NativeEndian.Uint32(b)), uint64(binary.NativeEndian.Uint32(b[4:]))
		}
		b = b[2*word:]
		switch {
		case k == atClkTck && v > 0:
			return float64(v), nil
		case k == atNull:
			b = nil
		}
	}
	return 0, errors.New("benchkit: the clock tick rate: no AT_CLKTCK in /proc/self/auxv")
}

// bootTime is when the machine booted, from /proc/stat's btime, to date
// /proc's process start times.
func bootTime() (time.Time, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return time.Time{}, fmt.Errorf("benchkit: the boot time: %w", err)
	}
	for line := range bytes.SplitSeq(b, []byte("\n")) {
		if v, ok := bytes.CutPrefix(line, []byte("btime ")); ok {
			sec, err := strconv.ParseInt(string(bytes.TrimSpace(v)), 10, 64)
			if err != nil {
				return time.Time{}, fmt.Errorf("benchkit: the boot time %q: %w", v, err)
			}
			return time.Unix(sec, 0), nil
		}
	}
	return time.Time{}, errors.New("benchkit: the boot time: no btime in /proc/stat")
}
