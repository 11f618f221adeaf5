package bench

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"sort"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Stages are the gateway's histograms that time an event's way from emit
// to watch, each named by where it is measured. A latency run reads them
// before and after (RunLatency), so that a tail can be placed: in the
// intake's acknowledgement, its owner's fold, the events write, the live
// feed, or a watch's queue.
var Stages = []struct{ Name, Metric, Label string }{
	{"intake log", "eventgate_intake_stage_seconds", "log"},
	{"owner consumer", "eventgate_intake_stage_seconds", "consumer"},
	{"events write", "eventgate_intake_stage_seconds", "write"},
	{"decision", "eventgate_intake_stage_seconds", "decide"},
	{"feed lag", "eventgate_watch_feed_lag_seconds", ""},
	{"stored→watch send", "eventgate_watch_send_lag_seconds", ""},
	// On the way to emit→queryable: one insert of a batch into the store.
	{"store insert", "eventgate_clickhouse_ingest_insert_duration_seconds", ""},
	// Not stages: a goroutine's wait to run, and the collector's pauses.
	{"scheduler wait", "eventgate_go_sched_latency_seconds", ""},
	{"GC pause", "eventgate_go_gc_pause_seconds", ""},
}

// histogram is a cumulative Prometheus histogram: counts[i] observations
// at most bounds[i] seconds.
type histogram struct {
	bounds []float64
	counts []uint64
}

// StageHistograms reads the Stages from the gateway's /metrics, by stage
// name; a stage the gateway does not export is left out.
func (g *Gateway) StageHistograms(ctx context.Context) (map[string]histogram, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, g.HTTPURL+"/metrics", nil)
	if err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	out := map[string]histogram{}
	for _, st := range Stages {
		fam := fams[st.Metric]
		if fam == nil {
			continue
		}
		for _, m := range fam.GetMetric() {
			if st.Label != "" && !hasLabel(m, st.Label) {
				continue
			}
			var h histogram
			for _, b := range m.GetHistogram().GetBucket() {
				h.bounds = append(h.bounds, b.GetUpperBound())
				h.counts = append(h.counts, b.GetCumulativeCount())
			}
			out[st.Name] = h
		}
	}
	return out, nil
}

func hasLabel(m *dto.Metric, value string) bool {
	for _, l := range m.GetLabel() {
		if l.GetValue() == value {
			return true
		}
	}
	return false
}

// quantileSince is the q-quantile, in milliseconds, of what h observed
// after before (the same histogram read earlier), interpolated within its
// bucket as Prometheus' histogram_quantile does; -1 without observations.
func (h histogram) quantileSince(before histogram, q float64) float64 {
	if len(before.counts) != len(h.counts) {
		before = histogram{counts: make([]uint64, len(h.counts))}
	}
	n := len(h.counts)
	if n == 0 {
		return -1
	}
	total := h.counts[n-1] - before.counts[n-1]
	if total == 0 {
		return -1
	}
	rank := q * float64(total)
	i := sort.Search(n, func(i int) bool { return float64(h.counts[i]-before.counts[i]) >= rank })
	if i == n {
		return h.bounds[n-1] * 1000 // past the last bound
	}
	lo, below := 0.0, uint64(0)
	if i > 0 {
		lo, below = h.bounds[i-1], h.counts[i-1]-before.counts[i-1]
	}
	if math.IsInf(h.bounds[i], 1) {
		return lo * 1000 // past the last finite bound
	}
	in := h.counts[i] - before.counts[i] - below
	frac := 1.0
	if in > 0 {
		frac = (rank - float64(below)) / float64(in)
	}
	return (lo + (h.bounds[i]-lo)*frac) * 1000
}

// StageP99s is each stage's p99 between two readings, as "name p99"
// pairs in the order of Stages.
func StageP99s(before, after map[string]histogram) string {
	var parts []string
	for _, st := range Stages {
		h, ok := after[st.Name]
		if !ok {
			continue
		}
		if p := h.quantileSince(before[st.Name], 0.99); p >= 0 {
			parts = append(parts, fmt.Sprintf("%s %.1f", st.Name, p))
		}
	}
	return strings.Join(parts, ", ")
}
