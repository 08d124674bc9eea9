package benchkit

import (
	"fmt"
	"io"
	"strings"
	"time"
)

// Report is everything a run prints: where it ran, how, and the cells.
type Report struct {
	Machine  Machine
	Rounds   int
	Bound    time.Duration // of one run of one system
	Settings []string      // one line each: peers' and baton's settings
	Cells    []CellResult
}

// Print writes the report as Markdown: a header with the machine, versions
// and settings, the rates of every system, then the ratios with their goals.
func (r Report) Print(w io.Writer) {
	fmt.Fprintf(w, "# baton side by side with its peers\n\n")
	fmt.Fprintf(w, "- machine: %s\n", r.Machine)
	for _, s := range r.Settings {
		fmt.Fprintf(w, "- %s\n", s)
	}
	fmt.Fprintf(w, "- %d alternation(s) per cell unless the table says otherwise, each system's run bounded to %v; "+
		"every ratio is taken within one alternation, where both systems ran one after the other\n\n", r.Rounds, r.Bound)

	fmt.Fprintf(w, "## Rates (median and min–max over the runs)\n\n")
	fmt.Fprintln(w, "| work | system | rate | min–max | runs | p50 | p99 |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|")
	for _, c := range r.Cells {
		for _, s := range c.Cell.System {
			st := c.Rates[s.Name]
			p50, p99 := latencies(c.Samples[s.Name])
			fmt.Fprintf(w, "| %s | %s | %s %s | %s–%s | %d | %s | %s |\n", cellName(c.Cell), s.Name,
				Human(st.Median), c.Cell.Unit, Human(st.Min), Human(st.Max), st.N, p50, p99)
		}
	}

	fmt.Fprintf(w, "\n## Ratios (median and min–max over the alternations)\n\n")
	fmt.Fprintln(w, "| work | ratio | median | min–max | alternations | goal | |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|")
	for _, c := range r.Cells {
		for i, ratio := range c.Cell.Ratios {
			st := c.Ratios[i]
			what, goal := "rate", "≥ "
			if ratio.Kind == Cost {
				what, goal = "time per op", "≤ "
			}
			mark := ""
			if ratio.Goal == 0 {
				goal = "–"
			} else {
				goal += fmt.Sprintf("%.2f×", ratio.Goal)
				mark = "met"
				if !c.Met(i) {
					mark = "**missed**"
				}
			}
			fmt.Fprintf(w, "| %s | %s ÷ %s (%s) | %s× | %s–%s | %d | %s | %s |\n", cellName(c.Cell),
				ratio.Of, ratio.Over, what, fmtRatio(st.Median), fmtRatio(st.Min), fmtRatio(st.Max), st.N, goal, mark)
		}
	}
	r.printCPU(w)
}

// printCPU writes the CPU per process of the systems that measured it, in
// core-seconds per second of the run, or nothing when none did.
func (r Report) printCPU(w io.Writer) {
	header := false
	for _, c := range r.Cells {
		for _, s := range c.Cell.System {
			var wal, server, bench []float64
			for _, sample := range c.Samples[s.Name] {
				if u := sample.CPU; u != nil {
					if u.WALSenderPID != 0 {
						wal = append(wal, u.WALSender)
					}
					server, bench = append(server, u.Server), append(bench, u.Bench)
				}
			}
			if len(server) == 0 {
				continue
			}
			if !header {
				fmt.Fprintf(w, "\n## CPU per process (core-seconds per second of the run, median and min–max over the runs)\n\n")
				fmt.Fprintln(w, "| work | system | WAL sender | rest of the server | bench process | runs |")
				fmt.Fprintln(w, "|---|---|---|---|---|---|")
				header = true
			}
			fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %d |\n", cellName(c.Cell), s.Name, fmtCPU(wal), fmtCPU(server), fmtCPU(bench), len(server))
		}
	}
}

// fmtCPU writes a median and its min–max, or – for no values.
func fmtCPU(v []float64) string {
	if len(v) == 0 {
		return "–"
	}
	st := StatOf(v)
	return fmt.Sprintf("%.2f (%.2f–%.2f)", st.Median, st.Min, st.Max)
}

// fmtRatio writes a ratio with three decimals below 10, so that a median
// just past its goal does not print as the goal itself, and one above.
func fmtRatio(v float64) string {
	if v < 10 {
		return fmt.Sprintf("%.3f", v)
	}
	return fmt.Sprintf("%.1f", v)
}

func cellName(c Cell) string {
	if c.Name == "" {
		return c.Group
	}
	return c.Group + ", " + c.Name
}

// latencies is the median over the runs of each run's p50 and p99, or
// blanks when the system records none.
func latencies(samples []Sample) (p50, p99 string) {
	var a, b []float64
	for _, s := range samples {
		if len(s.Latencies) == 0 {
			continue
		}
		a = append(a, float64(s.Quantile(0.50)))
		b = append(b, float64(s.Quantile(0.99)))
	}
	if len(a) == 0 {
		return "", ""
	}
	return fmtDur(StatOf(a).Median), fmtDur(StatOf(b).Median)
}

// HumanLatency writes a latency rounded to what a measurement means: to
// the millisecond from 10 ms, to 10 µs from 10 µs, to 100 ns below.
func HumanLatency(d time.Duration) string { return fmtDur(float64(d)) }

func fmtDur(ns float64) string {
	d := time.Duration(ns)
	switch {
	case d >= 10*time.Millisecond:
		return d.Round(time.Millisecond).String()
	case d >= 10*time.Microsecond:
		return d.Round(10 * time.Microsecond).String()
	default:
		return d.Round(100 * time.Nanosecond).String()
	}
}

// Human writes a rate with three significant digits and a k or M suffix.
func Human(v float64) string {
	suffix := ""
	switch {
	case v >= 1e6:
		v, suffix = v/1e6, " M"
	case v >= 1e3:
		v, suffix = v/1e3, " k"
	}
	var s string
	switch {
	case v >= 100:
		s = fmt.Sprintf("%.0f", v)
	case v >= 10:
		s = fmt.Sprintf("%.1f", v)
	default:
		s = fmt.Sprintf("%.2f", v)
	}
	return strings.TrimSpace(s + suffix)
}
