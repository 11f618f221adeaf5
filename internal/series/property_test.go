package series

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
)

// genLog is a random partition log: occurrences of nKeys keys (a few hot,
// tenants and types mixed), bursts and pauses long enough to end series,
// and ticks; then a last tick an hour later that finishes everything. It
// returns how many occurrences each key has.
func genLog(r *rand.Rand, nKeys, n int) ([]logEntry, map[Key]int) {
	l := newLog()
	var log []logEntry
	occurred := map[Key]int{}
	for i := range n {
		var d time.Duration
		switch x := r.IntN(100); {
		case x < 85:
			d = time.Duration(r.IntN(3000)) * time.Millisecond
		case x < 97:
			d = time.Duration(r.IntN(90)) * time.Second
		default:
			d = 4*time.Minute + time.Duration(r.IntN(6*60))*time.Second
		}
		at, pos := l.next(d)
		if r.IntN(10) == 0 {
			log = append(log, logEntry{at: at, pos: pos})
			continue
		}
		k := r.IntN(nKeys)
		if r.IntN(2) == 0 {
			k = r.IntN(max(1, nKeys/10)) // hot keys
		}
		ev := mkEvent(fmt.Sprintf("k%d-o%d", k, i), withNote(fmt.Sprintf("note %d", i)), func(ev *eventgatev1.Event) {
			ev.Regarding.Name = fmt.Sprintf("pod-%d", k/3)
			ev.Tenant.Name = fmt.Sprintf("p%d", k%3) // the same object in three tenants
			if k%7 == 0 {
				ev.Type = "Normal"
			}
		})
		occurred[KeyOf(ev)]++
		log = append(log, logEntry{ev: ev, at: at, pos: pos})
	}
	at, pos := l.next(time.Hour)
	log = append(log, logEntry{at: at, pos: pos})
	return log, occurred
}

// runLog feeds the log to an aggregator as the partition owner does, and
// returns what reached the events stream. With crashes, the owner
// checkpoints and crashes at random: writes published since the last
// checkpoint may or may not have reached the stream, the next owner
// restores the last persisted snapshot, and the log redelivers from up to
// 30 entries before the snapshot's position.
func runLog(t *testing.T, cfg Config, log []logEntry, r *rand.Rand) (*store, Stats) {
	st := newStore(t)
	a := mustNew(t, cfg)
	a.SetReader(readerOf(log))
	var persisted []byte
	// Checkpoint segments by ID; a crash between a segment's write and its
	// head's leaves it behind, replaced by the next one with its ID.
	segments := map[uint64][]byte{}
	loadSegment := func(id uint64) ([]byte, error) {
		b, ok := segments[id]
		if !ok {
			return nil, fmt.Errorf("segment %d missing", id)
		}
		return b, nil
	}
	type pending struct {
		w  Write
		at time.Time
	}
	var inflight []pending
	var sum Stats
	addStats := func(s Stats) {
		sum.Occurrences += s.Occurrences
		sum.Duplicates += s.Duplicates
	}
	for i := 0; i < len(log); {
		e := log[i]
		i++
		redelivered := e.pos <= a.Position()
		d := apply(a, e)
		if redelivered && (len(d.Writes) > 0 || e.ev != nil && d.Outcome != Duplicate) {
			t.Fatalf("redelivered pos %d: %+v", e.pos, d)
		}
		for _, w := range d.Writes {
			if r == nil || r.IntN(10) < 7 {
				st.publish(w, e.at)
			} else {
				inflight = append(inflight, pending{w, e.at})
			}
		}
		if r == nil {
			continue
		}
		switch x := r.IntN(1000); {
		case x < 20: // checkpoint: every publish acknowledged, then persist
			for _, p := range inflight {
				st.publish(p.w, p.at)
			}
			inflight = nil
			if r.IntN(4) == 0 {
				b, err := a.Snapshot()
				if err != nil {
					t.Fatal(err)
				}
				persisted = b
				break
			}
			cp, err := a.Checkpoint()
			if err != nil {
				t.Fatal(err)
			}
			if cp.Segment != nil {
				segments[cp.Segment.ID] = cp.Segment.Data
			}
			persisted = cp.Head
		case x < 30: // crash: in-flight publishes are lost
			inflight = nil
			addStats(a.Stats())
			if persisted == nil {
				a = mustNew(t, cfg)
				a.SetReader(readerOf(log))
			} else {
				var err error
				if a, err = RestoreCheckpoint(cfg, persisted, loadSegment); err != nil {
					t.Fatal(err)
				}
				a.SetReader(readerOf(log))
			}
			i = max(0, int(a.Position())-r.IntN(30))
		}
	}
	for _, p := range inflight {
		st.publish(p.w, p.at)
	}
	s := a.Stats()
	addStats(s)
	sum.Keys = s.Keys
	return st, sum
}

// TestCrashProperty: over random logs, with random checkpoints, crashes and
// redeliveries, the events stream ends up with exactly the writes of a run
// without crashes; every key's stored events add up to its occurrences;
// every uid's Minutes add up to its count; every series ends Finished; and
// a series costs at most duration/FlushInterval + 3 writes.
func TestCrashProperty(t *testing.T) {
	seeds := 8
	if testing.Short() {
		seeds = 3
	}
	for _, tc := range []struct {
		name string
		cfg  Config
	}{
		{"uncapped", Config{Window: 2 * time.Minute, FlushInterval: 10 * time.Second, Heartbeat: time.Minute, FinishAfter: 2 * time.Minute}},
		{"capped", Config{Window: 2 * time.Minute, FlushInterval: 10 * time.Second, Heartbeat: time.Minute, FinishAfter: 2 * time.Minute, MaxActive: 20}},
		{"defaults", Config{}},
	} {
		for seed := range uint64(seeds) {
			t.Run(fmt.Sprintf("%s/seed%d", tc.name, seed), func(t *testing.T) {
				t.Parallel()
				r := rand.New(rand.NewPCG(seed, 0x5e71e5))
				log, occurred := genLog(r, 100, 4000)
				ref, refStats := runLog(t, tc.cfg, log, nil)
				got, gotStats := runLog(t, tc.cfg, log, r)

				sameWrites(t, ref, got)
				if refStats.Keys != 0 || gotStats.Keys != 0 {
					t.Errorf("keys left: %d, %d", refStats.Keys, gotStats.Keys)
				}
				total := 0
				for _, n := range occurred {
					total += n
				}
				if refStats.Occurrences != uint64(total) {
					t.Errorf("occurrences: %d observed, %d in the log", refStats.Occurrences, total)
				}
				cfg := tc.cfg.withDefaults()
				counted := map[Key]int{}
				series := 0
				for uid, u := range got.summarize() {
					counted[u.key] += int(u.count())
					if u.minutesSum != u.count() {
						t.Errorf("%s: minutes add up to %d, count %d", uid, u.minutesSum, u.count())
					}
					if u.final.Event.GetSeries() == nil {
						if u.writes != 1 {
							t.Errorf("singleton %s written %d times", uid, u.writes)
						}
						continue
					}
					series++
					if u.final.Event.Series.State != StateFinished {
						t.Errorf("%s ends %s", uid, u.final.Event.Series.State)
					}
					if limit := int(u.last.Sub(u.first)/cfg.FlushInterval) + 3; u.writes > limit {
						t.Errorf("%s: %d writes over %v, more than %d", uid, u.writes, u.last.Sub(u.first), limit)
					}
				}
				if diff := cmp.Diff(occurred, counted, cmpOpts); diff != "" {
					t.Errorf("counts per key (-occurred +stored):\n%s", diff)
				}
				if series == 0 {
					t.Error("the log formed no series")
				}
			})
		}
	}
}
