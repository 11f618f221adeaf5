// Package bench measures eventgate against the raw limits of its own parts
// in one run: it starts the real gateway binary on a fresh data directory,
// measures the embedded JetStream and ClickHouse engines and plain NATS
// fan-out on the same machine, then drives the gateway with a generated
// workload and prints one table (median of several runs per figure, each
// against its target). cmd/bench is the thin main; `make bench` runs it.
package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Percentile returns the p-quantile (0 ≤ p ≤ 1) of xs by the nearest-rank
// method on a sorted copy; 0 for no samples.
func Percentile(xs []float64, p float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	rank := int(math.Ceil(p * float64(len(s))))
	return s[min(max(rank-1, 0), len(s)-1)]
}

// Median is Percentile(xs, 0.5) for odd counts and the mean of the two
// middle values for even counts.
func Median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// Durations converts latencies to milliseconds.
func Durations(ds []time.Duration) []float64 {
	out := make([]float64, len(ds))
	for i, d := range ds {
		out[i] = float64(d) / float64(time.Millisecond)
	}
	return out
}

// Goal is a row's target: the median must be at least (AtLeast) or below
// (Below) Value.
type Goal struct {
	Value   float64 `json:"value"`
	AtLeast bool    `json:"atLeast"`
}

// AtLeast is the target "≥ v".
func AtLeast(v float64) *Goal { return &Goal{Value: v, AtLeast: true} }

// Below is the target "< v".
func Below(v float64) *Goal { return &Goal{Value: v} }

func (g *Goal) met(v float64) bool {
	if g.AtLeast {
		return v >= g.Value
	}
	return v < g.Value
}

func (g *Goal) String() string {
	if g.AtLeast {
		return "≥ " + formatValue(g.Value)
	}
	return "< " + formatValue(g.Value)
}

// Row is one figure of the table.
type Row struct {
	Section string `json:"section"`
	Name    string `json:"name"`
	Unit    string `json:"unit"`
	// Runs are the per-run values; Value is their median.
	Runs  []float64 `json:"runs,omitempty"`
	Value float64   `json:"value"`
	Goal  *Goal     `json:"target,omitempty"`
	// Status is "pass", "miss", "" (no target), "not built" or "error".
	Status string `json:"status"`
	Note   string `json:"note,omitempty"`
}

// Report is the whole result.
type Report struct {
	Scale   string    `json:"scale"`
	Commit  string    `json:"commit"`
	Machine Machine   `json:"machine"`
	Started time.Time `json:"started"`
	Elapsed string    `json:"elapsed"`
	Rows    []Row     `json:"rows"`
	Notes   []string  `json:"notes,omitempty"`
}

// Machine describes where the run happened.
type Machine struct {
	CPUs     int    `json:"cpus"`
	CPUModel string `json:"cpuModel"`
	MemoryMB int    `json:"memoryMB"`
	Kernel   string `json:"kernel,omitempty"`
	Go       string `json:"go"`
}

// Add appends a measured row: Value is the median of runs, and Status
// follows from goal.
func (r *Report) Add(section, name, unit string, runs []float64, goal *Goal, note string) {
	row := Row{Section: section, Name: name, Unit: unit, Runs: runs, Value: Median(runs), Goal: goal, Note: note}
	if goal != nil && len(runs) > 0 {
		row.Status = "miss"
		if goal.met(row.Value) {
			row.Status = "pass"
		}
	}
	if len(runs) == 0 {
		row.Status = "error"
	}
	r.Rows = append(r.Rows, row)
}

// AddValue appends a row whose value is not the median of its runs (a
// figure over all their samples together, say): the runs are shown beside
// it, and Status follows from value and goal.
func (r *Report) AddValue(section, name, unit string, value float64, runs []float64, goal *Goal, note string) {
	row := Row{Section: section, Name: name, Unit: unit, Runs: runs, Value: value, Goal: goal, Note: note}
	if goal != nil {
		row.Status = "miss"
		if goal.met(value) {
			row.Status = "pass"
		}
	}
	r.Rows = append(r.Rows, row)
}

// NotBuilt appends a row for a feature that has not landed.
func (r *Report) NotBuilt(section, name, unit string, goal *Goal, note string) {
	r.Rows = append(r.Rows, Row{Section: section, Name: name, Unit: unit, Goal: goal, Status: "not built", Note: note})
}

// Failed appends a row whose measurement failed.
func (r *Report) Failed(section, name, unit string, goal *Goal, err error) {
	r.Rows = append(r.Rows, Row{Section: section, Name: name, Unit: unit, Goal: goal, Status: "error", Note: err.Error()})
}

// Sort orders the rows by section, keeping the order within a section.
func (r *Report) Sort() {
	slices.SortStableFunc(r.Rows, func(a, b Row) int { return strings.Compare(a.Section, b.Section) })
}

// Find returns the first row named name, or nil.
func (r *Report) Find(name string) *Row {
	for i := range r.Rows {
		if r.Rows[i].Name == name {
			return &r.Rows[i]
		}
	}
	return nil
}

// formatValue prints a figure with three significant digits and thousands
// separators for large values.
func formatValue(v float64) string {
	switch a := math.Abs(v); {
	case a == 0:
		return "0"
	case a >= 1000:
		return thousands(int64(math.Round(v)))
	case a >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case a >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	case a >= 1:
		return strconv.FormatFloat(v, 'f', 2, 64)
	default:
		return strconv.FormatFloat(v, 'g', 3, 64)
	}
}

func thousands(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// WriteTable renders the report as a Markdown table (what the terminal and
// BENCHMARKS.md show).
func (r *Report) WriteTable(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "eventgate bench, scale %s, commit %s, %s\n", r.Scale, r.Commit, r.Started.UTC().Format(time.RFC3339))
	fmt.Fprintf(&b, "machine: %d CPUs (%s), %d MiB memory, %s\n\n", r.Machine.CPUs, r.Machine.CPUModel, r.Machine.MemoryMB, r.Machine.Go)
	b.WriteString("| section | figure | median | unit | runs | target | result | note |\n")
	b.WriteString("| --- | --- | ---: | --- | --- | --- | --- | --- |\n")
	for _, row := range r.Rows {
		value, runs := "", ""
		if row.Status != "not built" && !(row.Status == "error" && len(row.Runs) == 0) {
			value = formatValue(row.Value)
			parts := make([]string, len(row.Runs))
			for i, x := range row.Runs {
				parts[i] = formatValue(x)
			}
			runs = strings.Join(parts, " / ")
		}
		target := "—"
		if row.Goal != nil {
			target = row.Goal.String()
		}
		status := row.Status
		if status == "" {
			status = "—"
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %s |\n", row.Section, row.Name, value, row.Unit, runs, target,
			status, strings.ReplaceAll(row.Note, "|", "\\|"))
	}
	if len(r.Notes) > 0 {
		b.WriteString("\n")
		for _, n := range r.Notes {
			b.WriteString("- " + n + "\n")
		}
	}
	fmt.Fprintf(&b, "\nelapsed: %s\n", r.Elapsed)
	_, err := io.WriteString(w, b.String())
	return err
}

// WriteJSON writes the report as indented JSON.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(r); err != nil {
		return fmt.Errorf("encode report: %w", err)
	}
	return nil
}
