package faults

import (
	"flag"
	"testing"

	"github.com/baton-go/baton/internal/testenv"
)

// negative switches every scenario to its negative control: the children
// misuse the API on purpose, and the scenario must fail.
var negative = flag.Bool("faults.negative", false, "run the negative controls: every scenario must fail")

// seed fixes the fault schedules.
var seed = flag.Uint64("faults.seed", 1, "seed of the fault schedules")

func TestMain(m *testing.M) {
	testenv.RunChild(map[string]func([]string) int{
		"holder":   holderMain,
		"producer": producerMain,
		"driver":   driverMain,
		"worker":   workerMain,
	})
	testenv.Main(m)
}

// scenario starts a fault scenario, unless it was deferred to a run of its
// own.
func scenario(t *testing.T) {
	t.Helper()
	Scenario(t)
}
