package intake

import (
	"hash/crc32"
	"time"

	"github.com/eventgate/eventgate/internal/series"
)

// syncStats adds the aggregator's counters since the last call to the
// intake's, and logs evictions at the series cap.
func (pt *partition) syncStats() {
	if pt.agg == nil {
		return
	}
	s, l := pt.agg.Stats(), pt.lastStats
	pt.lastStats = s
	d := series.Stats{
		Occurrences:       s.Occurrences - l.Occurrences,
		Folded:            s.Folded - l.Folded,
		Duplicates:        s.Duplicates - l.Duplicates,
		EvictedSingletons: s.EvictedSingletons - l.EvictedSingletons,
		Reads:             s.Reads - l.Reads,
		Collisions:        s.Collisions - l.Collisions,
	}
	for r := range d.Writes {
		d.Writes[r] = s.Writes[r] - l.Writes[r]
	}
	pt.in.addStats(func(t *Stats) {
		t.Occurrences += d.Occurrences
		t.Folded += d.Folded
		t.Duplicates += d.Duplicates
		t.EvictedSingletons += d.EvictedSingletons
		t.FirstReads += d.Reads
		for r := range d.Writes {
			t.Writes[r] += d.Writes[r]
		}
	})
	m := pt.in.m
	m.occurrences.Add(float64(d.Occurrences))
	m.folded.Add(float64(d.Folded))
	m.saved.Add(float64(d.Folded))
	m.evicted.Add(float64(d.EvictedSingletons))
	m.reads.Add(float64(d.Reads))
	m.collisions.Add(float64(d.Collisions))
	for r := range d.Writes {
		if d.Writes[r] > 0 {
			m.writes.WithLabelValues(series.Reason(r).String()).Add(float64(d.Writes[r]))
		}
	}
	if d.EvictedSingletons > 0 || d.Writes[series.ReasonEvicted] > 0 {
		pt.budget.singletons += d.EvictedSingletons
		pt.budget.series += d.Writes[series.ReasonEvicted]
		if now := time.Now(); now.Sub(pt.budget.logged) >= budgetLogEvery {
			pt.log.Warn("series memory budget reached: singletons forgotten early, series finished early with their exact counts",
				"maxBytes", pt.agg.Config().MaxBytes, "maxActive", pt.agg.Config().MaxActive,
				"singletons", pt.budget.singletons, "series", pt.budget.series, "since", pt.budget.since(now))
			pt.budget = budgetLog{logged: now}
		}
	}
	pt.updateGauges()
}

// budgetLogEvery: a partition at its series memory budget under sustained
// load evicts at every batch; it says so once a minute, with the counts
// since it last did (eventgate_series_evicted_singletons_total counts them
// all).
const budgetLogEvery = time.Minute

// budgetLog accumulates a partition's evictions between two warnings.
type budgetLog struct {
	logged     time.Time // the last warning (zero: none yet)
	singletons uint64
	series     uint64
}

// since is how long the counts were accumulated, for the warning (0 for
// the first one).
func (b budgetLog) since(now time.Time) time.Duration {
	if b.logged.IsZero() {
		return 0
	}
	return now.Sub(b.logged).Round(time.Second)
}

func (pt *partition) updateGauges() {
	s := pt.agg.Stats()
	pt.in.m.active.Add(float64(int64(s.Series) - pt.nseries.Swap(int64(s.Series))))
	pt.in.m.tracked.Add(float64(int64(s.Keys) - pt.nkeys.Swap(int64(s.Keys))))
	pt.in.m.bytes.Add(float64(s.Bytes - pt.nbytes.Swap(s.Bytes)))
}

func crcOf(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }
