package benchkit

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"runtime"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"
	goredis "github.com/redis/go-redis/v9"
)

// Machine describes where a run happened. The load average matters on a
// shared machine: other processes' work is the noise the alternation and
// the medians are there to absorb.
type Machine struct {
	CPU        string
	Cores      int
	OS, Arch   string
	Go         string
	PostgreSQL string
	Redis      string
	LoadStart  string // 1, 5 and 15 minute load averages when the run began
	LoadEnd    string
}

func (m Machine) String() string {
	s := fmt.Sprintf("%s, %d cores, %s/%s, %s; PostgreSQL %s, Redis %s", m.CPU, m.Cores, m.OS, m.Arch, m.Go, m.PostgreSQL, m.Redis)
	switch {
	case m.LoadStart != "" && m.LoadEnd != "":
		s += fmt.Sprintf("; load average %s at the start, %s at the end", m.LoadStart, m.LoadEnd)
	case m.LoadStart != "":
		s += fmt.Sprintf("; load average %s at the start", m.LoadStart)
	}
	return s
}

// Describe fills in the machine and the servers' versions.
func Describe(ctx context.Context, pool *pgxpool.Pool, rdb *goredis.Client) (Machine, error) {
	m := Machine{CPU: cpuModel(), Cores: runtime.NumCPU(), OS: runtime.GOOS, Arch: runtime.GOARCH, Go: runtime.Version(),
		LoadStart: LoadAverage()}
	if err := pool.QueryRow(ctx, "SHOW server_version").Scan(&m.PostgreSQL); err != nil {
		return m, fmt.Errorf("benchkit: PostgreSQL version: %w", err)
	}
	if rdb != nil {
		info, err := rdb.Info(ctx, "server").Result()
		if err != nil {
			return m, fmt.Errorf("benchkit: Redis version: %w", err)
		}
		for line := range strings.SplitSeq(info, "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
				m.Redis = v
			}
		}
	}
	return m, nil
}

func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return "unknown CPU"
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.Join(strings.Fields(v), " ")
		}
	}
	return "unknown CPU"
}

// LoadAverage is the 1, 5 and 15 minute load averages, "" where the system
// does not say.
func LoadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}
