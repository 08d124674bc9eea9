package benchkit

import (
	"bytes"
	"context"
	"encoding/binary"
	"strconv"
	"strings"
	"testing"
	"time"
)

// statLine is a /proc/<pid>/stat line of proc(5)'s layout with the given
// command name, ppid and times; the other fields are filler.
func statLine(pid int, comm string, ppid int, utime, stime, cutime, cstime, start uint64) string {
	f := make([]string, 50) // fields 3 to 52
	for i := range f {
		f[i] = "0"
	}
	f[0] = "S"
	set := func(field int, v uint64) { f[field-3] = strconv.FormatUint(v, 10) }
	set(4, uint64(ppid))
	set(14, utime)
	set(15, stime)
	set(16, cutime)
	set(17, cstime)
	set(22, start)
	f[18-3] = "-2" // priority: signed fields are not the parser's business
	return strconv.Itoa(pid) + " (" + comm + ") " + strings.Join(f, " ") + "\n"
}

func TestParseProcStat_TheCommandNameEndsAtTheLastParenthesis(t *testing.T) {
	for _, comm := range []string{"postgres", "a b", "x) 1 2 (y", "((", ") R 99 ", ""} {
		st, err := parseProcStat([]byte(statLine(4242, comm, 17, 311, 52, 7, 3, 80955)))
		if err != nil {
			t.Fatalf("comm %q: %v", comm, err)
		}
		want := procStat{PID: 4242, PPID: 17, Comm: comm, UTime: 311, STime: 52, CUTime: 7, CSTime: 3, StartTime: 80955}
		if st != want {
			t.Errorf("comm %q: parsed %+v; want %+v", comm, st, want)
		}
	}
}

func TestParseProcStat_ReadsThisProcess(t *testing.T) {
	st, err := readProcStat("self")
	if err != nil {
		t.Skipf("no /proc here: %v", err)
	}
	if st.PID <= 0 || st.PPID < 0 || st.StartTime == 0 {
		t.Fatalf("own stat %+v; want a pid, a ppid and a start time", st)
	}
}

func TestParseProcStat_RefusesWhatIsNotAStatLine(t *testing.T) {
	for _, line := range []string{
		"",
		"4242 postgres S 1",       // no parentheses
		"x (postgres) S 1",        // no pid
		"4242 (postgres) S 1 2 3", // too few fields
		statLine(4242, "p", 1, 1, 2, 3, 4, 5)[:40],                                  // cut short
		strings.Replace(statLine(4242, "p", 1, 11, 2, 3, 4, 5), " 11 ", " -11 ", 1), // negative utime
	} {
		if st, err := parseProcStat([]byte(line)); err == nil {
			t.Errorf("parseProcStat(%q) = %+v; want an error", line, st)
		}
	}
}

func TestAuxvClockTick_FindsATClkTck(t *testing.T) {
	word := strconv.IntSize / 8
	auxv := func(pairs ...uint64) []byte {
		var b []byte
		for _, v := range pairs {
			if word == 8 {
				b = binary.NativeEndian.AppendUint64(b, v)
			} else {
				b = binary.NativeEndian.AppendUint32(b, uint32(v))
			}
		}
		return b
	}
	if hz, err := auxvClockTick(auxv(6, 4096, 17, 100, 0, 0)); err != nil || hz != 100 {
		t.Fatalf("auxvClockTick = %v, %v; want 100", hz, err)
	}
	// An entry after AT_NULL is not part of the vector.
	if hz, err := auxvClockTick(auxv(6, 4096, 0, 0, 17, 100)); err == nil {
		t.Fatalf("auxvClockTick read %v past AT_NULL", hz)
	}
	if hz, err := clockTick(); err == nil && hz <= 0 {
		t.Fatalf("this process's clock tick rate is %v", hz)
	}
}

func TestCPUUse_SplitsTheWALSenderFromTheRestOfTheServer(t *testing.T) {
	at := time.Unix(1000, 0)
	start := cpuSnapshot{at: at, self: 100, server: 1000, children: map[int]uint64{10: 500, 11: 400}}
	// Over 2s at 100 ticks/s: the WAL sender 12 started during the run and
	// used 180 ticks; child 11 exited (reaped: its 450 went to the
	// postmaster's children's time) and 10 used 20 more.
	end := cpuSnapshot{at: at.Add(2 * time.Second), self: 300, server: 1000 - 400 + 450 + 20 + 180,
		children: map[int]uint64{10: 520, 12: 180}}
	u := cpuUse(start, end, 12, 100)
	if want := (CPUUse{WALSender: 0.9, WALSenderPID: 12, Server: 0.35, Bench: 1}); *u != want {
		t.Fatalf("cpuUse = %+v; want %+v", *u, want)
	}
	// No WAL sender (the walk): it all goes to the rest of the server.
	if u := cpuUse(start, end, 0, 100); u.WALSenderPID != 0 || u.WALSender != 0 || u.Server != 1.25 {
		t.Fatalf("cpuUse without a WAL sender = %+v; want 1.25 for the rest of the server", *u)
	}
}

func TestServerCPU_NilMeasuresNothing(t *testing.T) {
	var s *ServerCPU
	if u := s.Start()(context.Background()); u != nil {
		t.Fatalf("a nil ServerCPU measured %+v", *u)
	}
}

func TestReport_PrintsTheCPUOfTheRunsThatMeasuredIt(t *testing.T) {
	res := CellResult{
		Cell: Cell{Group: "logical relay", Name: "batch 1000", Unit: "entries/s", System: []System{{Name: "log"}, {Name: "walk"}, {Name: "bare"}}},
		Samples: map[string][]Sample{
			"log": {{Ops: 1, Elapsed: time.Second, CPU: &CPUUse{WALSender: 0.95, WALSenderPID: 7, Server: 0.2, Bench: 0.5}},
				{Ops: 1, Elapsed: time.Second, CPU: &CPUUse{WALSender: 0.99, WALSenderPID: 8, Server: 0.3, Bench: 0.7}}},
			"walk": {{Ops: 1, Elapsed: time.Second, CPU: &CPUUse{Server: 0.8, Bench: 0.6}}},
			"bare": {{Ops: 1, Elapsed: time.Second}},
		},
	}
	var b bytes.Buffer
	Report{Cells: []CellResult{res}}.Print(&b)
	out := b.String()
	for _, want := range []string{
		"## CPU per process",
		"| logical relay, batch 1000 | log | 0.97 (0.95–0.99) | 0.25 (0.20–0.30) | 0.60 (0.50–0.70) | 2 |",
		"| logical relay, batch 1000 | walk | – | 0.80 (0.80–0.80) | 0.60 (0.60–0.60) | 1 |",
	} {
		if !strings.Contains(out, want) {
			t.Fatalf("report lacks %q:\n%s", want, out)
		}
	}
	if _, cpu, _ := strings.Cut(out, "## CPU per process"); strings.Contains(cpu, "| bare |") {
		t.Fatalf("a system without CPU figures has a CPU row:\n%s", out)
	}
	b.Reset()
	Report{}.Print(&b)
	if strings.Contains(b.String(), "CPU per process") {
		t.Fatalf("a report without CPU figures prints their table:\n%s", b.String())
	}
}
