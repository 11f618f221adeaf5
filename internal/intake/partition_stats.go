package intake

import (
	"hash/crc32"

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
		pt.log.Warn("series memory budget reached: singletons forgotten early, series finished early with their exact counts",
			"maxBytes", pt.agg.Config().MaxBytes, "maxActive", pt.agg.Config().MaxActive, "singletons", d.EvictedSingletons, "series", d.Writes[series.ReasonEvicted])
	}
	pt.updateGauges()
}

func (pt *partition) updateGauges() {
	s := pt.agg.Stats()
	pt.in.m.active.Add(float64(int64(s.Series) - pt.nseries.Swap(int64(s.Series))))
	pt.in.m.tracked.Add(float64(int64(s.Keys) - pt.nkeys.Swap(int64(s.Keys))))
	pt.in.m.bytes.Add(float64(s.Bytes - pt.nbytes.Swap(s.Bytes)))
}

func crcOf(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }
