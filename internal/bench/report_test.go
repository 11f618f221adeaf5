package bench

import (
	"bytes"
	"encoding/json"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/eventgate/eventgate/internal/event"
)

func TestPercentile(t *testing.T) {
	hundred := make([]float64, 100)
	for i := range hundred {
		hundred[i] = float64(100 - i) // 100..1, unsorted
	}
	tests := []struct {
		name string
		xs   []float64
		p    float64
		want float64
	}{
		{"empty", nil, 0.5, 0},
		{"one", []float64{7}, 0.99, 7},
		{"p50 of 1..100", hundred, 0.5, 50},
		{"p99 of 1..100", hundred, 0.99, 99},
		{"p100 of 1..100", hundred, 1, 100},
		{"p0 of 1..100", hundred, 0, 1},
		{"p99 of three", []float64{3, 1, 2}, 0.99, 3},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in := append([]float64(nil), tc.xs...)
			if got := Percentile(tc.xs, tc.p); got != tc.want {
				t.Errorf("Percentile(%v) = %v, want %v", tc.p, got, tc.want)
			}
			if diff := cmp.Diff(in, tc.xs); diff != "" {
				t.Errorf("input modified (-before +after):\n%s", diff)
			}
		})
	}
}

func TestMedian(t *testing.T) {
	for _, tc := range []struct {
		xs   []float64
		want float64
	}{{nil, 0}, {[]float64{5}, 5}, {[]float64{9, 1, 5}, 5}, {[]float64{4, 1, 3, 2}, 2.5}} {
		if got := Median(tc.xs); got != tc.want {
			t.Errorf("Median(%v) = %v, want %v", tc.xs, got, tc.want)
		}
	}
}

func TestFormatValue(t *testing.T) {
	for v, want := range map[float64]string{0: "0", 0.0123: "0.0123", 1.234: "1.23", 12.34: "12.3", 123.4: "123", 1234567: "1,234,567", -4321: "-4,321"} {
		if got := formatValue(v); got != want {
			t.Errorf("formatValue(%v) = %q, want %q", v, got, want)
		}
	}
}

func sampleReport() *Report {
	r := &Report{Scale: "small", Commit: "abc123", Started: time.Date(2026, 11, 22, 1, 2, 3, 0, time.UTC),
		Machine: Machine{CPUs: 2, CPUModel: "Test CPU", MemoryMB: 1024, Go: "go1.26"}, Elapsed: "1m0s"}
	r.Add(SecEmit, "EmitStream efficiency", "ratio", []float64{0.5, 0.7, 0.65}, AtLeast(0.6), "note | with a pipe")
	r.Add(SecBaseline, "JetStream PublishAsync", "events/s", []float64{150000, 160000, 155000}, nil, "")
	r.Add(SecLatency, "emit→watch p99", "ms", []float64{60, 40, 55}, Below(50), "")
	r.NotBuilt(SecQuery, "Facets p50", "ms", Below(100), "")
	r.Sort()
	return r
}

func TestReportStatus(t *testing.T) {
	r := sampleReport()
	got := map[string]string{}
	for _, row := range r.Rows {
		got[row.Name] = row.Status
	}
	want := map[string]string{
		"EmitStream efficiency":  "pass", // median 0.65 ≥ 0.6
		"JetStream PublishAsync": "",
		"emit→watch p99":         "miss", // median 55 ≥ 50
		"Facets p50":             "not built",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("statuses (-want +got):\n%s", diff)
	}
	var sections []string
	for _, row := range r.Rows {
		sections = append(sections, row.Section)
	}
	if diff := cmp.Diff([]string{SecBaseline, SecEmit, SecLatency, SecQuery}, sections); diff != "" {
		t.Errorf("row order (-want +got):\n%s", diff)
	}
}

func TestAddValueKeepsTheValueGivenAndJudgesIt(t *testing.T) {
	var r Report
	// A pooled figure above the goal while most runs are below it: the
	// value decides, not the runs' median.
	r.AddValue(SecRules, "pooled", "ratio", 1.3, []float64{0.9, 1.0, 1.8}, Below(1.1), "")
	r.AddValue(SecRules, "no runs", "ratio", 1.05, nil, Below(1.1), "")
	r.AddValue(SecRules, "no goal", "ratio", 2, nil, nil, "")
	type got struct {
		Value  float64
		Status string
	}
	var rows []got
	for _, row := range r.Rows {
		rows = append(rows, got{row.Value, row.Status})
	}
	if diff := cmp.Diff([]got{{1.3, "miss"}, {1.05, "pass"}, {2, ""}}, rows); diff != "" {
		t.Errorf("rows (-want +got):\n%s", diff)
	}
}

func TestAARatiosCompareEachWindowWithTheMeanOfItsNeighbours(t *testing.T) {
	got := aaRatios([]float64{10, 20, 30, 60, 30})
	if diff := cmp.Diff([]float64{1, 30.0 / 40, 60.0 / 30}, got); diff != "" {
		t.Errorf("ratios (-want +got):\n%s", diff)
	}
	if got := aaRatios([]float64{1, 2}); len(got) != 0 {
		t.Errorf("two windows: %v, want none", got)
	}
}

func TestGeoMeanIntervalBracketsTheGeometricMeanOfTheWindows(t *testing.T) {
	g, lo, hi := geoMeanInterval([]float64{2, 2, 2}, 500)
	if g != 2 || lo != 2 || hi != 2 {
		t.Errorf("windows alike: %v (%v–%v), want 2 (2–2)", g, lo, hi)
	}
	xs := []float64{0.5, 1, 2, 4, 1, 1.5, 0.8, 1.2}
	g, lo, hi = geoMeanInterval(xs, 2000)
	if want := math.Pow(0.5*1*2*4*1*1.5*0.8*1.2, 1.0/8); math.Abs(g-want) > 1e-12 {
		t.Errorf("geometric mean %v, want %v", g, want)
	}
	if !(0.5 < lo && lo < g && g < hi && hi < 4) {
		t.Errorf("interval %v–%v does not bracket %v within the windows' range", lo, hi, g)
	}
	if g2, lo2, hi2 := geoMeanInterval(xs, 2000); g2 != g || lo2 != lo || hi2 != hi {
		t.Errorf("a second call gave %v (%v–%v), want the same (a fixed seed)", g2, lo2, hi2)
	}
	if g, lo, hi := geoMeanInterval(nil, 10); g != 0 || lo != 0 || hi != 0 {
		t.Errorf("no windows: %v %v %v", g, lo, hi)
	}
}

func TestWriteTable(t *testing.T) {
	var b bytes.Buffer
	if err := sampleReport().WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"eventgate bench, scale small, commit abc123, 2026-11-22T01:02:03Z",
		"| 1 baseline | JetStream PublishAsync | 155,000 | events/s | 150,000 / 160,000 / 155,000 | — | — |  |",
		"| 2 emit | EmitStream efficiency | 0.65 | ratio | 0.5 / 0.7 / 0.65 | ≥ 0.6 | pass | note \\| with a pipe |",
		"| 3 latency @50% | emit→watch p99 | 55.0 | ms | 60.0 / 40.0 / 55.0 | < 50.0 | miss |  |",
		"| 4 query (store) | Facets p50 |  | ms |  | < 100 | not built |  |",
	} {
		if !strings.Contains(out, want+"\n") {
			t.Errorf("table lacks line\n%s\ngot:\n%s", want, out)
		}
	}
}

func TestWriteJSON(t *testing.T) {
	r := sampleReport()
	var b bytes.Buffer
	if err := r.WriteJSON(&b); err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(b.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(r, &back); diff != "" {
		t.Errorf("JSON round trip (-want +got):\n%s", diff)
	}
}

func TestWorkload(t *testing.T) {
	w := NewWorkload("t")
	rng := rand.New(rand.NewPCG(1, 2))
	norm := event.Normalizer{Limits: event.DefaultLimits()}
	repeats, total, size := 0, 2000, 0
	keys := map[string]int{}
	for i := 0; i < total; i++ {
		ev, tenant := w.Event(rng, time.Now())
		if ev.Tenant.Name != TenantName(tenant) {
			t.Fatalf("tenant %q, index %d", ev.Tenant.Name, tenant)
		}
		if vs := norm.Normalize(ev, nil, "", "e"); len(vs) > 0 {
			t.Fatalf("invalid workload event: %v", vs)
		}
		raw, err := event.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		size += len(raw)
		keys[ev.Regarding.Name]++
		if strings.Contains(ev.Regarding.Name, "-hot-") {
			repeats++
		}
	}
	if share := float64(repeats) / float64(total); share < 0.15 || share > 0.25 {
		t.Errorf("repeat share %.2f, want about 0.2", share)
	}
	if mean := size / total; mean < 550 || mean > 650 {
		t.Errorf("mean encoded size %d bytes, want about 600", mean)
	}
	for k, n := range keys {
		if !strings.Contains(k, "-hot-") && n > 1 {
			t.Errorf("unique object %s emitted %d times", k, n)
		}
	}
}

func TestStoreInsertSQLSize(t *testing.T) {
	// ClickHouse's default max_query_size is 256 KiB.
	if n := len(storeInsertSQL("eventgate.events", 0, 100_000, 10_000_000, time.Now())); n > 200_000 {
		t.Errorf("store INSERT is %d bytes", n)
	}
}

func TestSpreadIsTheRangeOverTheLowestRun(t *testing.T) {
	for _, c := range []struct {
		runs []float64
		want float64
	}{
		{[]float64{100, 100, 100}, 0},
		{[]float64{12, 10, 11}, 20},
		{[]float64{15731, 14164, 13765, 13641, 13852, 12525}, 100 * (15731.0 - 12525) / 12525},
	} {
		if got := spread(c.runs); math.Abs(got-c.want) > 1e-9 {
			t.Errorf("spread(%v) = %v, want %v", c.runs, got, c.want)
		}
	}
}
