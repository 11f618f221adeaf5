package series

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	gocmp "github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"

	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
)

// podEvent is an event about its own pod: a key of its own.
func podEvent(uid, pod string) *eventgatev1.Event {
	return mkEvent(uid, func(ev *eventgatev1.Event) { ev.Regarding.Name = pod })
}

// TestSeriesStartReadsFirstOccurrenceBackFromLog: a singleton whose event
// left the ring of recent ones is continued from the log: the series write
// carries every field of the first occurrence (labels included, which the
// key does not cover), and a read that fails decides nothing, so the entry
// can be observed again.
func TestSeriesStartReadsFirstOccurrenceBackFromLog(t *testing.T) {
	a := mustNew(t, Config{MaxBytes: 64 << 10}) // a ring of 8 KiB
	l := newLog()
	var log []logEntry
	add := func(ev *eventgatev1.Event) logEntry {
		at, pos := l.next(time.Millisecond)
		e := logEntry{ev: ev, at: at, pos: pos}
		log = append(log, e)
		return e
	}
	first := podEvent("first", "web")
	first.Labels = map[string]string{"team": "payments"}
	first.Note = "first note"
	must(a.Observe(first, add(first).at, 1))
	for i := range 100 { // about 20 KiB of other singletons
		ev := podEvent(fmt.Sprintf("other-%d", i), fmt.Sprintf("pod-%d", i))
		e := add(ev)
		must(a.Observe(ev, e.at, e.pos))
	}

	second := podEvent("second", "web")
	second.Note = "second note"
	e := add(second)
	a.SetReader(func(pos uint64) ([]byte, error) { return nil, errors.New("log unavailable") })
	if _, err := a.Observe(second, e.at, e.pos); err == nil {
		t.Fatal("Observe with an unreadable first occurrence succeeded")
	}
	if a.Position() != e.pos-1 {
		t.Fatalf("a failed Observe moved the position to %d", a.Position())
	}

	a.SetReader(readerOf(log))
	d, err := a.Observe(second, e.at, e.pos)
	if err != nil {
		t.Fatal(err)
	}
	if d.Outcome != SeriesStarted || d.UID != "first" || len(d.Writes) != 1 {
		t.Fatalf("second occurrence: %+v, want the series of uid first started", d)
	}
	want := proto.Clone(first).(*eventgatev1.Event)
	want.Note = "second note"
	got := proto.Clone(d.Writes[0].Event).(*eventgatev1.Event)
	got.Series = nil
	if diff := gocmp.Diff(want, got, protocmp.Transform()); diff != "" {
		t.Errorf("series write (-first occurrence with the latest note +got):\n%s", diff)
	}
	if s := a.Stats(); s.Reads != 1 {
		t.Errorf("Stats.Reads = %d, want 1 (the first occurrence was not in the ring)", s.Reads)
	}
}

// TestSeriesStartFromRecentRingNeedsNoRead: a repeat within the ring's
// reach starts its series without reading the log.
func TestSeriesStartFromRecentRingNeedsNoRead(t *testing.T) {
	a := mustNew(t, Config{})
	a.SetReader(func(uint64) ([]byte, error) { return nil, errors.New("the log must not be read") })
	l := newLog()
	at, pos := l.next(0)
	must(a.Observe(podEvent("u1", "web"), at, pos))
	at, pos = l.next(time.Second)
	d, err := a.Observe(podEvent("u2", "web"), at, pos)
	if err != nil || d.Outcome != SeriesStarted || d.UID != "u1" {
		t.Fatalf("repeat: %+v, %v; want the series of u1 started", d, err)
	}
}

// TestKeyHashCollisionMakesANewSingleton: when a tracked hash reads back
// an event of another key, the new occurrence is a singleton of its own
// and the tracked one is forgotten; no series mixes the two keys.
func TestKeyHashCollisionMakesANewSingleton(t *testing.T) {
	a := mustNew(t, Config{})
	l := newLog()
	other := podEvent("other", "db")
	raw, err := proto.MarshalOptions{Deterministic: true}.Marshal(other)
	if err != nil {
		t.Fatal(err)
	}
	ev := podEvent("mine", "web")
	at, pos := l.next(0)
	// A tracked singleton under ev's hash whose event is other's: what a
	// collision of the two keys' hashes would leave.
	a.advance(at, pos)
	a.single.add(hashKey(appendKey(nil, ev)), tenantOf(ev), at.UnixNano(), pos, raw)

	at, pos = l.next(time.Second)
	d := must(a.Observe(ev, at, pos))
	if d.Outcome != Created || d.UID != "mine" {
		t.Fatalf("colliding occurrence: %+v, want a singleton of its own", d)
	}
	if s := a.Stats(); s.Collisions != 1 || s.Keys != 1 {
		t.Errorf("Stats = %+v, want 1 collision and 1 key", s)
	}
	at, pos = l.next(time.Second)
	if d := must(a.Observe(podEvent("again", "web"), at, pos)); d.Outcome != SeriesStarted || d.UID != "mine" {
		t.Errorf("repeat of the new singleton: %+v, want its series started", d)
	}
}

// TestMemoryBudgetBoundsTrackedKeys: under a stream of distinct events the
// tracked keys stay within MaxBytes, the oldest singletons are forgotten
// (counted), and a series is never the price of a singleton.
func TestMemoryBudgetBoundsTrackedKeys(t *testing.T) {
	cfg := Config{MaxBytes: 256 << 10}
	a := mustNew(t, cfg)
	l := newLog()
	at, pos := l.next(0)
	must(a.Observe(podEvent("s1", "hot"), at, pos))
	at, pos = l.next(time.Millisecond)
	must(a.Observe(podEvent("s2", "hot"), at, pos))
	for i := range 20_000 {
		at, pos := l.next(time.Millisecond)
		must(a.Observe(podEvent(fmt.Sprintf("u%d", i), fmt.Sprintf("pod-%d", i)), at, pos))
		if s := a.Stats(); s.Bytes > cfg.MaxBytes {
			t.Fatalf("after %d events: %d bytes tracked, budget %d", i+1, s.Bytes, cfg.MaxBytes)
		}
	}
	s := a.Stats()
	if s.EvictedSingletons == 0 || s.Series != 1 || s.Writes[ReasonEvicted] != 0 {
		t.Errorf("Stats = %+v, want singletons evicted and the one series kept", s)
	}
	if s.Keys < 1000 {
		t.Errorf("only %d keys tracked in %d bytes", s.Keys, cfg.MaxBytes)
	}
}

// TestIdleSeriesDoNotCrowdOutANewStorm: series that stopped recurring
// (and are not yet finished) leave an eighth of the budget to the
// singletons' records; past it the least recently observed is finished
// early, with its exact count, so that a new storm's second occurrence
// still finds its first. Before, the series filled the budget and each new
// singleton pushed out the one before it: no new storm was folded.
func TestIdleSeriesDoNotCrowdOutANewStorm(t *testing.T) {
	cfg := Config{MaxBytes: 256 << 10}
	a := mustNew(t, cfg)
	l := newLog()
	st := newStore(t)
	occurrences := map[Key]int{}
	observe := func(ev *eventgatev1.Event) Decision {
		t.Helper()
		at, pos := l.next(time.Millisecond)
		d := must(a.Observe(ev, at, pos))
		occurrences[KeyOf(ev)]++
		for _, w := range d.Writes {
			st.publish(w, at)
		}
		if s := a.Stats(); s.Bytes > cfg.MaxBytes {
			t.Fatalf("%d bytes tracked, budget %d", s.Bytes, cfg.MaxBytes)
		}
		return d
	}
	// Storms of two occurrences each, one after another, far more than
	// the budget holds as series.
	for i := range 2000 {
		pod := fmt.Sprintf("old-%d", i)
		observe(podEvent(pod+"-a", pod))
		if d := observe(podEvent(pod+"-b", pod)); d.Outcome != SeriesStarted {
			t.Fatalf("storm %d: its second occurrence %v, want a series started", i, d.Outcome)
		}
	}
	if s := a.Stats(); s.Writes[ReasonEvicted] == 0 {
		t.Fatalf("Stats = %+v, want idle series finished early at the budget", s)
	}
	// A new storm between distinct events: its first occurrence is still
	// tracked when the second comes.
	observe(podEvent("new-a", "new"))
	for i := range 200 {
		observe(podEvent(fmt.Sprintf("u%d", i), fmt.Sprintf("pod-%d", i)))
	}
	if d := observe(podEvent("new-b", "new")); d.Outcome != SeriesStarted {
		t.Fatalf("the new storm's second occurrence: %v, want a series started", d.Outcome)
	}
	// No count is lost: per key, the stored events add up to the
	// occurrences once every series is finished.
	at, pos := l.next(time.Hour)
	for _, w := range a.Tick(at, pos) {
		st.publish(w, at)
	}
	got := map[Key]int{}
	for _, u := range st.summarize() {
		got[u.key] += int(u.count())
	}
	if diff := gocmp.Diff(occurrences, got, cmpOpts); diff != "" {
		t.Errorf("counts per key (-occurred +stored):\n%s", diff)
	}
}

// TestRecentRingKeepsTheLastEncodings: the ring of recent encodings
// returns exactly what was put for as long as it holds it (growing up to
// its maximum as the stream does), and nothing once it was overwritten.
func TestRecentRingKeepsTheLastEncodings(t *testing.T) {
	const max = 100 << 10
	r := recent{max: max}
	type put struct {
		off uint64
		n   uint32
		b   []byte
	}
	var puts []put
	for i := range 5000 {
		b := []byte(fmt.Sprintf("%d:%s", i, make([]byte, i%977)))
		off, n := r.put(b)
		puts = append(puts, put{off, n, b})
		if len(r.buf) > max {
			t.Fatalf("ring of %d bytes, max %d", len(r.buf), max)
		}
		for j := len(puts) - 1; j >= 0 && j > len(puts)-50; j-- {
			p := puts[j]
			got, ok := r.get(p.off, p.n)
			held := r.end-p.off <= uint64(len(r.buf))
			if ok != held || ok && string(got) != string(p.b) {
				t.Fatalf("after put %d, get of put %d: ok %v (held %v), %d bytes, want %d", i, j, ok, held, len(got), len(p.b))
			}
		}
	}
	if got, ok := r.get(puts[0].off, puts[0].n); ok {
		t.Errorf("the first encoding is still returned (%d bytes) after %d bytes", len(got), r.end)
	}
}

// TestFloodingTenantForgetsOnlyItsOwnSingletons: at the memory budget, a
// tenant that tracks more than an eighth of the singletons and more than
// twice as many as the others on average gives up its own oldest ones: a
// tenant flooding distinct events does not make another tenant's repeats
// new singletons.
func TestFloodingTenantForgetsOnlyItsOwnSingletons(t *testing.T) {
	a := mustNew(t, Config{MaxBytes: 256 << 10})
	l := newLog()
	var log []logEntry
	a.SetReader(func(pos uint64) ([]byte, error) { return readerOf(log)(pos) })
	inTenant := func(tenant, uid, pod string) *eventgatev1.Event {
		ev := podEvent(uid, pod)
		ev.Tenant.Name = tenant
		at, pos := l.now, l.pos
		log = append(log, logEntry{ev: ev, at: at, pos: pos})
		return ev
	}
	for i := range 50 {
		at, pos := l.next(time.Millisecond)
		must(a.Observe(inTenant("quiet", fmt.Sprintf("q%d", i), fmt.Sprintf("pod-%d", i)), at, pos))
	}
	for i := range 20_000 {
		at, pos := l.next(time.Millisecond)
		must(a.Observe(inTenant("flood", fmt.Sprintf("f%d", i), fmt.Sprintf("pod-%d", i)), at, pos))
	}
	if s := a.Stats(); s.EvictedSingletons == 0 {
		t.Fatalf("Stats = %+v: the flood should have reached the budget", s)
	}
	for i := range 50 {
		at, pos := l.next(time.Millisecond)
		d := must(a.Observe(inTenant("quiet", fmt.Sprintf("again-%d", i), fmt.Sprintf("pod-%d", i)), at, pos))
		if d.Outcome != SeriesStarted || d.UID != fmt.Sprintf("q%d", i) {
			t.Fatalf("quiet tenant's repeat %d: %+v, want its series started", i, d)
		}
	}
	// Expired singletons leave their tenant's list too.
	at, pos := l.next(DefaultWindow + time.Second)
	a.Tick(at, pos)
	for id, ts := range a.single.tenants {
		if len(ts.idxs) > 2*ts.live+64 {
			t.Errorf("tenant %x lists %d singletons for %d live", id, len(ts.idxs), ts.live)
		}
	}
}

// TestSinglesIndexAgreesWithAMap: through adds, removals out of order,
// expiry from the oldest and compactions, the singles find exactly the
// tracked hashes, at their positions, with their first encodings while
// the recent ring holds them. Hashes share their index home bits in
// clusters, so that probing and backward-shift deletion run long.
func TestSinglesIndexAgreesWithAMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	s := newSingles(64 << 10)
	want := map[hash128]uint64{}
	raws := map[uint64][]byte{}
	var order []hash128 // in log order, including forgotten ones
	pos := uint64(0)
	check := func(step int) {
		t.Helper()
		if s.live() != len(want) {
			t.Fatalf("step %d: %d live, want %d", step, s.live(), len(want))
		}
		for h, p := range want {
			v, ok := s.get(h)
			if !ok || v.pos != p {
				t.Fatalf("step %d: get(%x) = %+v %v, want position %d", step, h, v, ok, p)
			}
			if raw, ok := s.encoding(v); ok && string(raw) != string(raws[p]) {
				t.Fatalf("step %d: encoding of %d is %q, want %q", step, p, raw, raws[p])
			}
		}
	}
	for step := range 30_000 {
		switch op := rng.IntN(10); {
		case op < 6: // a new singleton
			var h hash128
			binary.LittleEndian.PutUint64(h[:8], uint64(rng.IntN(1024))) // clustered homes
			binary.LittleEndian.PutUint64(h[8:], rng.Uint64()|1)
			pos++
			raw := []byte(fmt.Sprintf("event %d", pos))
			s.add(h, uint64(rng.IntN(5)), int64(pos), pos, raw)
			want[h], raws[pos] = pos, raw
			order = append(order, h)
		case op < 9 && len(order) > 0: // forgotten out of order
			h := order[rng.IntN(len(order))]
			s.remove(h)
			delete(want, h)
		default: // the oldest expires
			if r, ok := s.oldest(); ok {
				s.remove(r.h)
				delete(want, r.h)
				s.pop()
			}
		}
		if step%997 == 0 {
			check(step)
		}
	}
	check(-1)
	for _, h := range order {
		if _, tracked := want[h]; !tracked {
			if v, ok := s.get(h); ok {
				t.Fatalf("forgotten %x still found at %d", h, v.pos)
			}
		}
	}
}

// TestAStormAmongManyTenantsAtTheBudgetIsFolded: at the memory budget,
// with many tenants tracking a few singletons each, a new storm of a few
// more keys than that, or of ten times as many, recurring round robin, is
// folded: its tenant does not give up the key that recurs next while
// older singletons of other tenants are there. Before, its tenant tracked the most
// as soon as its keys outnumbered the others', and each new key pushed
// out the oldest of its own, the next to recur: every occurrence was
// stored as new.
func TestAStormAmongManyTenantsAtTheBudgetIsFolded(t *testing.T) {
	a := mustNew(t, Config{MaxBytes: 256 << 10})
	l := newLog()
	var log []logEntry
	a.SetReader(func(pos uint64) ([]byte, error) { return readerOf(log)(pos) })
	observe := func(tenant, uid, pod string) Decision {
		t.Helper()
		ev := podEvent(uid, pod)
		ev.Tenant.Name = tenant
		at, pos := l.next(time.Millisecond)
		log = append(log, logEntry{ev: ev, at: at, pos: pos})
		return must(a.Observe(ev, at, pos))
	}
	// 500 tenants, 6 distinct events each: more than the budget holds.
	for i := range 6 {
		for n := range 500 {
			observe(fmt.Sprintf("t%d", n), fmt.Sprintf("t%d-%d", n, i), fmt.Sprintf("pod-%d", i))
		}
	}
	s0 := a.Stats()
	if s0.EvictedSingletons == 0 {
		t.Fatalf("Stats = %+v: the tenants should have filled the budget", s0)
	}
	perTenant := s0.Keys / 500
	// Storms of a few more keys than a tenant tracks, and of ten times as
	// many, round robin.
	for _, storm := range []struct {
		tenant string
		keys   int
	}{{"storm", perTenant + 3}, {"storm-10x", 10 * perTenant}} {
		for round := range 20 {
			for k := range storm.keys {
				d := observe(storm.tenant, fmt.Sprintf("%s-%d-%d", storm.tenant, k, round), fmt.Sprintf("crashloop-%d", k))
				want := Counted
				switch round {
				case 0:
					want = Created
				case 1:
					want = SeriesStarted
				}
				if d.Outcome != want {
					t.Fatalf("%s: round %d, key %d of %d (tenants track %d each): %v, want %v", storm.tenant, round, k, storm.keys, perTenant, d.Outcome, want)
				}
			}
		}
	}
}
