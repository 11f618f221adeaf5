package series

import (
	"container/heap"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
)

// Series states, as in events.k8s.io (the same strings as package event's).
const (
	StateOngoing  = "Ongoing"
	StateFinished = "Finished"
)

// Outcome says what Observe did with an occurrence.
type Outcome uint8

// Outcomes. The zero Outcome is none of them.
const (
	// Created: the occurrence is stored as a new singleton event.
	Created Outcome = iota + 1
	// SeriesStarted: the occurrence turned a singleton into a series.
	SeriesStarted
	// Counted: the occurrence was counted into an ongoing series.
	Counted
	// Duplicate: the log position was already observed (a redelivery after a
	// restore); the occurrence was ignored.
	Duplicate
)

func (o Outcome) String() string {
	switch o {
	case Created:
		return "created"
	case SeriesStarted:
		return "started"
	case Counted:
		return "counted"
	case Duplicate:
		return "duplicate"
	}
	return "Outcome(" + strconv.Itoa(int(o)) + ")"
}

// Reason says why a Write was emitted.
type Reason uint8

// Reasons, usable as indexes of Stats.Writes.
const (
	// ReasonCreated: the first occurrence, stored as a singleton.
	ReasonCreated Reason = iota
	// ReasonStarted: the second occurrence started a series (count 2).
	ReasonStarted
	// ReasonFlush: the count changed and FlushInterval passed.
	ReasonFlush
	// ReasonHeartbeat: Heartbeat passed without a write.
	ReasonHeartbeat
	// ReasonFinished: no occurrence for FinishAfter (or the count reached
	// its int32 limit); state Finished.
	ReasonFinished
	// ReasonEvicted: finished early, state Finished, to make room for a new
	// key at MaxActive.
	ReasonEvicted
	// NumReasons is the number of reasons.
	NumReasons
)

var reasonNames = [NumReasons]string{"created", "started", "flush", "heartbeat", "finished", "evicted"}

func (r Reason) String() string {
	if r < NumReasons {
		return reasonNames[r]
	}
	return "Reason(" + strconv.Itoa(int(r)) + ")"
}

// MinuteCount is how many occurrences of a series fell in one minute.
type MinuteCount struct {
	// Start is the minute's first instant, UTC (log time).
	Start time.Time
	Count int32
}

// Write is one version of a stored event that the caller must publish.
type Write struct {
	Key    Key
	Reason Reason
	// Seq numbers the writes of one event uid: 1 for Created, 2 for
	// SeriesStarted, then one more per write. See ID.
	Seq uint32
	// Event is the event to store, owned by the caller. A series write carries
	// the first occurrence's uid, name and eventTime (and every other field)
	// with the latest occurrence's note and Series {count, lastObservedTime,
	// state}; a Created write is the occurrence itself, without series (the
	// very event passed to ObserveEncoded, not a copy).
	Event *eventgatev1.Event
	// Raw, when not nil, is Event's encoding as passed to ObserveEncoded:
	// publish it instead of encoding Event again. Not to be modified.
	Raw []byte
	// Minutes counts the occurrences folded since the previous write of the
	// same uid, per minute of log time, in ascending order: over all writes of
	// one uid they sum to its final count. Nil for a heartbeat.
	Minutes []MinuteCount
}

// ID names the write uniquely and deterministically:
// "<tenant type>/<tenant name>/<uid>/<seq>". Replaying the log from a
// snapshot yields the same ID for the same content, so use it as the
// Nats-Msg-Id of the publish and as the dedup key downstream.
func (w Write) ID() string {
	t := w.Event.GetTenant()
	return t.GetType() + "/" + t.GetName() + "/" + w.Event.GetUid() + "/" + strconv.FormatUint(uint64(w.Seq), 10)
}

// Decision is what Observe did with one log entry.
type Decision struct {
	Outcome Outcome
	// UID is the uid of the stored event the occurrence is now part of: its
	// own for Created, the series' for SeriesStarted and Counted, empty for
	// Duplicate.
	UID string
	// Writes to publish, in order: those of other series that fell due at this
	// entry's log time, any series finished to make room for a new key, and
	// finally this occurrence's own write (Created, SeriesStarted), if any.
	Writes []Write
}

// Stats are the aggregator's counters, for metrics. Keys and Series are
// gauges; the rest count since New or Restore.
type Stats struct {
	// Keys is the number of tracked keys: singletons plus ongoing series.
	Keys int
	// Series is the number of ongoing series.
	Series int
	// Occurrences observed (duplicates excluded).
	Occurrences uint64
	// Folded: occurrences counted into an ongoing series without a write of
	// their own — the writes saved.
	Folded uint64
	// Duplicates: redelivered log entries ignored.
	Duplicates uint64
	// Bytes is the memory the tracked keys account for (a gauge; see
	// Config.MaxBytes).
	Bytes int64
	// EvictedSingletons: singletons forgotten early to stay within the
	// budget (nothing is lost: they are stored; a later isomorphic event is
	// a new singleton). Series finished early are Writes[ReasonEvicted].
	EvictedSingletons uint64
	// Reads: first occurrences read back from the log (see Reader).
	Reads uint64
	// Collisions: tracked singletons forgotten because a different key had
	// the same 128-bit hash.
	Collisions uint64
	// Writes emitted, by reason.
	Writes [NumReasons]uint64
}

// TotalWrites is the number of writes emitted.
func (s Stats) TotalWrites() uint64 {
	var n uint64
	for _, w := range s.Writes {
		n += w
	}
	return n
}

// Reader reads the log: the encoding of the occurrence at position pos, as
// it was passed to ObserveEncoded (for Observe, any encoding of the event).
// The aggregator reads a singleton's first occurrence back when a second
// one starts a series, unless it still holds its encoding. It must return
// the same bytes for a position every time, for as long as a singleton may
// be tracked (Window after its log time, plus a takeover).
type Reader func(pos uint64) ([]byte, error)

// ErrNoReader is returned by Observe when a singleton's first occurrence
// is no longer held and the aggregator has no Reader.
var ErrNoReader = errors.New("series: first occurrence not held and no log reader")

// Aggregator folds one partition's occurrences into series. It is not safe
// for concurrent use: one goroutine feeds it the partition's log in order.
type Aggregator struct {
	cfg                              Config
	window, flush, heartbeat, finish int64 // nanoseconds
	read                             Reader
	entries                          map[string]*entry // ongoing series
	tenantSeries                     map[uint64]int    // ongoing series by tenant (see tenantOf)
	single                           singles
	timers                           timers
	series                           list // ongoing series, least recently observed first
	seriesBytes                      int64
	pos                              uint64
	clock                            int64 // latest log time seen, unix ns
	buf, tmp                         []byte
	stats                            Stats
	// Incremental checkpoints (see Checkpoint): singletons at or after
	// unckpt are in no segment yet; segs counts the live singletons of
	// each segment, by ID, ascending; removed holds the positions of
	// segment singletons gone out of order since.
	unckpt  uint64
	segs    []segLive
	removed []uint64
}

type segLive struct {
	id uint64
	n  int
}

// entry is one ongoing series.
type entry struct {
	key       string
	uid       string
	ev        *eventgatev1.Event // first occurrence, series cleared; never modified
	enc       []byte             // ev encoded, once (checkpoints write it every time)
	note      string             // latest occurrence's note
	count     int32
	last      int64    // log time of the latest occurrence
	lastWrite int64    // log time of the latest write
	seq       uint32   // writes emitted
	pending   []minute // occurrences not yet written, ascending by minute
	due       int64    // heap key: never later than dueOf(e)
	pos       uint64   // log position of the first occurrence
	bytes     int64    // estimated memory, for the budget
	idx       int      // index in Aggregator.timers, -1 if not there
	prev      *entry   // in Aggregator.series
	next      *entry
}

type minute struct {
	m int64 // unix minute
	n int32
}

// New returns an empty Aggregator.
func New(cfg Config) (*Aggregator, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	return &Aggregator{
		cfg:       cfg,
		window:    int64(cfg.Window),
		flush:     int64(cfg.FlushInterval),
		heartbeat: int64(cfg.Heartbeat),
		finish:    int64(cfg.FinishAfter),
		entries:   make(map[string]*entry),
		single:    newSingles(int(cfg.MaxBytes / recentShare)),
		clock:     math.MinInt64,
		unckpt:    1,
	}, nil
}

// NewAt returns an empty Aggregator at log position pos: it ignores the
// entries at or below pos as redeliveries. It stands in for a checkpoint at
// pos that can no longer be read (damaged): the series and singletons it
// held are not tracked any more.
func NewAt(cfg Config, pos uint64) (*Aggregator, error) {
	a, err := New(cfg)
	if err != nil {
		return nil, err
	}
	a.pos, a.unckpt = pos, pos+1
	return a, nil
}

// recentShare: the ring of recent encodings takes 1/recentShare of the
// memory budget.
const recentShare = 8

// SetReader sets the reader of first occurrences that are no longer held.
func (a *Aggregator) SetReader(r Reader) { a.read = r }

// Config returns the configuration in use, defaults filled in.
func (a *Aggregator) Config() Config { return a.cfg }

// Position is the highest log position observed: resume the log after it.
func (a *Aggregator) Position() uint64 { return a.pos }

// Observe folds one occurrence: ev at log time at, log position pos.
// ObserveEncoded is the same with ev's encoding at hand.
//
// at is the durable log's timestamp of the entry (the same clock for every
// replica), not ev's eventTime; a timestamp earlier than one already seen is
// taken as the latest seen. pos must grow from entry to entry; an entry at or
// below Position is a redelivery and is ignored (Outcome Duplicate).
//
// ev must be normalized, uid included. Observe may keep ev: the caller must
// not modify it afterwards. ev.Series is ignored (the aggregator owns it);
// events that arrive already aggregated by their emitter should bypass the
// aggregator.
//
// An error means a singleton's first occurrence could not be read back
// (see Reader); nothing was decided and Position did not move: the entry
// may be observed again.
func (a *Aggregator) Observe(ev *eventgatev1.Event, at time.Time, pos uint64) (Decision, error) {
	return a.observe(ev, nil, at, pos)
}

// ObserveEncoded is Observe of ev whose deterministic protobuf encoding is
// raw (as the durable log holds it). A Created write carries ev itself with
// Raw = raw: the caller must modify neither until it has published the
// write.
func (a *Aggregator) ObserveEncoded(ev *eventgatev1.Event, raw []byte, at time.Time, pos uint64) (Decision, error) {
	return a.observe(ev, raw, at, pos)
}

func (a *Aggregator) observe(ev *eventgatev1.Event, raw []byte, at time.Time, pos uint64) (Decision, error) {
	if ev == nil {
		panic("series: Observe of a nil event")
	}
	if pos <= a.pos {
		a.stats.Duplicates++
		return Decision{Outcome: Duplicate}, nil
	}
	// Singletons whose window closed by now are forgotten first (which
	// writes nothing, and a retry of this entry would do again), so that
	// a tracked one is within Window, and its first occurrence is read,
	// the one step that may fail, before anything else changes.
	t := a.logTime(at)
	a.expireSingles(t)
	a.buf = appendKey(a.buf[:0], ev)
	var first *eventgatev1.Event
	var h hash128
	if a.entries[string(a.buf)] == nil {
		h = hashKey(a.buf)
		if s, ok := a.single.get(h); ok {
			f, err := a.firstOccurrence(s)
			if err != nil {
				return Decision{}, err
			}
			if a.tmp = appendKey(a.tmp[:0], f); string(a.tmp) == string(a.buf) {
				first = f
			} else {
				a.dropSingle(h, s.pos)
				a.stats.Collisions++
			}
		}
	}

	a.advance(at, pos)
	ws := a.runTimers(t, nil)
	a.stats.Occurrences++
	e := a.entries[string(a.buf)]
	switch {
	case e == nil && first != nil:
		// Still tracked, so within Window: its series starts.
		s, _ := a.single.get(h)
		a.dropSingle(h, s.pos)
		e = a.track(string(a.buf), first, s.pos)
		e.count = 2
		e.seq = 1 // its Created write
		e.fold(ev, t)
		ws = append(ws, a.write(e, ReasonStarted, t))
		ws = a.fitBudget(t, ws, e)
		return Decision{Outcome: SeriesStarted, UID: e.uid, Writes: ws}, nil
	case e == nil:
	case e.count == math.MaxInt32:
		// The stored count cannot grow: close this series, start anew.
		ws = append(ws, a.write(e, ReasonFinished, t))
		a.forget(e)
	default:
		e.count++
		clean := len(e.pending) == 0
		e.fold(ev, t)
		a.series.moveToBack(e)
		if clean {
			// A changed count is due after FlushInterval, earlier than the
			// heartbeat the entry was waiting for.
			a.reschedule(e)
		}
		a.stats.Folded++
		return Decision{Outcome: Counted, UID: e.uid, Writes: ws}, nil
	}

	// A new singleton: stored as it is, and tracked by its key's hash.
	return a.created(ev, raw, t, pos, h, ws), nil
}

// created stores ev, whose key is in a.buf, as a new singleton: as it is
// (written after ws, the writes already due), and tracked by its key's
// hash h (computed here when zero).
func (a *Aggregator) created(ev *eventgatev1.Event, raw []byte, t int64, pos uint64, h hash128, ws []Write) Decision {
	if h == (hash128{}) {
		h = hashKey(a.buf)
	}
	ws = a.fitBudget(t, ws, nil)
	var w Write
	if raw != nil && ev.Series == nil {
		// The occurrence is the write, as it is.
		w = Write{Key: Key{string(a.buf)}, Reason: ReasonCreated, Seq: 1, Event: ev, Raw: raw}
	} else {
		c := proto.Clone(ev).(*eventgatev1.Event)
		c.Series = nil
		w = Write{Key: Key{string(a.buf)}, Reason: ReasonCreated, Seq: 1, Event: c}
		if raw == nil {
			raw, _ = proto.MarshalOptions{Deterministic: true}.Marshal(c)
		}
	}
	a.stats.Writes[ReasonCreated]++
	// Its one occurrence: a singleton keeps no pending minutes.
	w.Minutes = []MinuteCount{{Start: time.Unix(minuteOf(t)*60, 0).UTC(), Count: 1}}
	ws = append(ws, w)
	a.single.add(h, tenantOf(ev), t, pos, raw)
	return Decision{Outcome: Created, UID: ev.GetUid(), Writes: ws}
}

// firstOccurrence returns singleton s's first occurrence, series cleared.
func (a *Aggregator) firstOccurrence(s single) (*eventgatev1.Event, error) {
	raw, ok := a.single.encoding(s)
	if !ok {
		if a.read == nil {
			return nil, fmt.Errorf("%w (position %d)", ErrNoReader, s.pos)
		}
		var err error
		if raw, err = a.read(s.pos); err != nil {
			return nil, fmt.Errorf("series: read first occurrence at %d: %w", s.pos, err)
		}
		a.stats.Reads++
	}
	ev := new(eventgatev1.Event)
	if err := proto.Unmarshal(raw, ev); err != nil {
		return nil, fmt.Errorf("series: first occurrence at %d does not decode: %w", s.pos, err)
	}
	ev.Series = nil
	return ev, nil
}

// track adds an ongoing series of key, first occurrence first at log
// position pos, to the indexes (its timer is set by its first write).
func (a *Aggregator) track(key string, first *eventgatev1.Event, pos uint64) *entry {
	e := &entry{key: key, uid: first.GetUid(), ev: first, note: first.GetNote(), pos: pos, idx: -1}
	e.bytes = int64(entryBytes + 2*len(key) + 4*proto.Size(first))
	a.entries[key] = e
	if a.tenantSeries == nil {
		a.tenantSeries = make(map[uint64]int)
	}
	a.tenantSeries[tenantOf(first)]++
	a.series.pushBack(e)
	a.seriesBytes += e.bytes
	return e
}

// entryBytes estimates an ongoing series' memory besides its key and
// event: the entry, its map slot, its timer and its pending minutes.
const entryBytes = 256

// Tick advances the log clock to at, the log timestamp of a tick entry at
// position pos (an entry that carries no occurrence), and returns the writes
// due by then: flushes, heartbeats and finishes. A tick at or below Position
// is a redelivery and returns nothing.
func (a *Aggregator) Tick(at time.Time, pos uint64) []Write {
	if pos <= a.pos {
		a.stats.Duplicates++
		return nil
	}
	t := a.logTime(at)
	a.expireSingles(t)
	a.advance(at, pos)
	return a.runTimers(t, nil)
}

// NextDue is the log time at which the next write (flush, heartbeat or
// finish) falls due, if any: when the wall clock passes it and nothing is
// consumed meanwhile, put a tick in the log. (Singletons whose window closed
// need no tick: the next entry forgets them.)
func (a *Aggregator) NextDue() (time.Time, bool) {
	for len(a.timers) > 0 {
		e := a.timers[0]
		if d := a.dueOf(e); d != e.due {
			e.due = d
			heap.Fix(&a.timers, 0)
			continue
		}
		return time.Unix(0, e.due).UTC(), true
	}
	return time.Time{}, false
}

// Stats returns the counters.
func (a *Aggregator) Stats() Stats {
	s := a.stats
	s.Keys = len(a.entries) + a.single.live()
	s.Series = a.series.n
	s.Bytes = a.bytes()
	return s
}

// TenantKeys returns the keys tracked for the tenant of type typ and name
// name ("" for the global tenant): singletons plus ongoing series, and the
// ongoing series among them.
func (a *Aggregator) TenantKeys(typ, name string) (keys, series int) {
	id := tenantID(typ, name)
	series = a.tenantSeries[id]
	if t := a.single.tenants[id]; t != nil {
		keys = t.live
	}
	return keys + series, series
}

// bytes is the memory the tracked keys account for (see Config.MaxBytes).
func (a *Aggregator) bytes() int64 { return a.single.bytes() + a.seriesBytes }

// logTime is the log time of an entry stamped at: never earlier than one
// seen before.
func (a *Aggregator) logTime(at time.Time) int64 { return max(at.UnixNano(), a.clock) }

// advance moves the log clock and position to an entry's.
func (a *Aggregator) advance(at time.Time, pos uint64) {
	a.pos = pos
	a.clock = a.logTime(at)
}

// dueOf is the log time at which series e needs its next write.
func (a *Aggregator) dueOf(e *entry) int64 {
	d := e.last + a.finish + 1 // a gap of exactly FinishAfter still continues it
	if len(e.pending) > 0 {
		return min(d, e.lastWrite+a.flush)
	}
	return min(d, e.lastWrite+a.heartbeat)
}

// expireSingles forgets the singletons whose window closed before t. They
// are in log-time order (the clock never goes back); a gap of exactly
// Window still starts a series. They are stored: forgetting them writes
// nothing.
func (a *Aggregator) expireSingles(t int64) {
	for a.single.n > 0 {
		r := a.single.at(0)
		if t <= r.last+a.window {
			return
		}
		if a.single.isLive(r) {
			a.dropSingle(r.h, r.pos)
		}
		a.single.pop()
	}
}

// runTimers handles every series due at or before t, appending writes to
// ws. The writes of one call are sorted by key, so that their order does
// not depend on the heap's history: a restored aggregator emits the same
// sequence.
func (a *Aggregator) runTimers(t int64, ws []Write) []Write {
	start := len(ws)
	for len(a.timers) > 0 {
		e := a.timers[0]
		if e.due > t {
			break
		}
		if d := a.dueOf(e); d > t {
			e.due = d
			heap.Fix(&a.timers, 0)
			continue
		}
		switch {
		case t > e.last+a.finish:
			ws = append(ws, a.write(e, ReasonFinished, t))
			a.forget(e)
		case len(e.pending) > 0:
			ws = append(ws, a.write(e, ReasonFlush, t))
		default:
			ws = append(ws, a.write(e, ReasonHeartbeat, t))
		}
	}
	if len(ws)-start > 1 {
		slices.SortFunc(ws[start:], func(x, y Write) int { return strings.Compare(x.Key.s, y.Key.s) })
	}
	return ws
}

// fitBudget makes room, before a new singleton is tracked (keep == nil) or
// after series keep started: while the tracked keys exceed MaxBytes (or
// MaxActive), the least recently observed series other than keep is
// finished with its exact count if the series hold more than seriesRoom,
// else a singleton is forgotten (singles.evictable: the oldest, or the
// oldest of a tenant that tracks far more than the others; it is stored,
// nothing is lost), or, when
// there is none, the least recently observed series.
//
// Without the share, series that stopped recurring (a storm over, not yet
// FinishAfter ago) filled the budget, and each new singleton then pushed
// out the one before it at once: a new storm's second occurrence found its
// first forgotten, and no storm was folded any more.
func (a *Aggregator) fitBudget(t int64, ws []Write, keep *entry) []Write {
	next := int64(0)
	if keep == nil {
		next = singleBytes
	}
	for {
		keys := len(a.entries) + a.single.live()
		over := a.bytes()+next > a.cfg.MaxBytes
		if keep == nil && a.cfg.MaxActive > 0 && keys >= a.cfg.MaxActive {
			over = true
		}
		if !over {
			return ws
		}
		if e := a.series.head; e != nil && e != keep && a.seriesBytes > a.seriesRoom() {
			ws = append(ws, a.write(e, ReasonEvicted, t))
			a.forget(e)
			continue
		}
		if r, ok := a.single.evictable(); ok {
			a.dropSingle(r.h, r.pos)
			a.stats.EvictedSingletons++
			continue
		}
		e := a.series.head
		if e == nil || e == keep {
			return ws
		}
		ws = append(ws, a.write(e, ReasonEvicted, t))
		a.forget(e)
	}
}

// singletonShare: the series leave the singletons' records at least this
// share of the budget (besides the ring of recent encodings and the
// index), long enough for a storm's second occurrence to find its first:
// an eighth of the default budget holds about 6,000 singletons.
const singletonShare = 8

// seriesRoom is how many bytes the series may hold before the least
// recently observed makes room ahead of the singletons.
func (a *Aggregator) seriesRoom() int64 {
	return a.cfg.MaxBytes - a.single.overhead() - a.cfg.MaxBytes/singletonShare
}

// fold records one more occurrence of e's key (count already updated).
func (e *entry) fold(ev *eventgatev1.Event, t int64) {
	// A copy: ev may be decoded in place from a buffer the series is not
	// to keep (event.UnmarshalAliased).
	e.note = strings.Clone(ev.GetNote())
	e.last = t
	e.addMinute(t)
}

// minuteOf is the unix minute of log time t.
func minuteOf(t int64) int64 {
	m := t / int64(time.Minute)
	if t < 0 && t%int64(time.Minute) != 0 {
		m-- // floor
	}
	return m
}

func (e *entry) addMinute(t int64) {
	m := minuteOf(t)
	if n := len(e.pending); n > 0 && e.pending[n-1].m == m {
		e.pending[n-1].n++
		return
	}
	e.pending = append(e.pending, minute{m: m, n: 1})
}

// write emits series e's current state at log time t and reschedules e.
func (a *Aggregator) write(e *entry, r Reason, t int64) Write {
	ev := proto.Clone(e.ev).(*eventgatev1.Event)
	ev.Note = e.note
	state := StateOngoing
	if r == ReasonFinished || r == ReasonEvicted {
		state = StateFinished
	}
	ev.Series = &eventgatev1.EventSeries{
		Count: e.count,
		// Kubernetes' MicroTime: microsecond precision.
		LastObservedTime: timestamppb.New(time.Unix(0, e.last).UTC().Truncate(time.Microsecond)),
		State:            state,
	}
	e.seq++
	w := Write{Key: Key{e.key}, Reason: r, Seq: e.seq, Event: ev}
	if len(e.pending) > 0 {
		w.Minutes = make([]MinuteCount, len(e.pending))
		for i, p := range e.pending {
			w.Minutes[i] = MinuteCount{Start: time.Unix(p.m*60, 0).UTC(), Count: p.n}
		}
		e.pending = e.pending[:0]
	}
	e.lastWrite = t
	a.stats.Writes[r]++
	a.reschedule(e)
	return w
}

// encode appends the encoding of e's first occurrence to b.
func (e *entry) encode() ([]byte, error) {
	if e.enc == nil {
		b, err := proto.MarshalOptions{Deterministic: true}.Marshal(e.ev)
		if err != nil {
			return nil, fmt.Errorf("series: encode event %s: %w", e.uid, err)
		}
		e.enc = b
	}
	return e.enc, nil
}

// reschedule sets e's timer to its due time, adding it to the heap if new.
func (a *Aggregator) reschedule(e *entry) {
	e.due = a.dueOf(e)
	if e.idx < 0 {
		heap.Push(&a.timers, e)
		return
	}
	heap.Fix(&a.timers, e.idx)
}

// forget stops tracking series e.
func (a *Aggregator) forget(e *entry) {
	delete(a.entries, e.key)
	if t := tenantOf(e.ev); a.tenantSeries[t] <= 1 {
		delete(a.tenantSeries, t)
	} else {
		a.tenantSeries[t]--
	}
	if e.idx >= 0 {
		heap.Remove(&a.timers, e.idx)
	}
	a.series.remove(e)
	a.seriesBytes -= e.bytes
}

// timers is a min-heap of ongoing series by due.
type timers []*entry

func (h timers) Len() int           { return len(h) }
func (h timers) Less(i, j int) bool { return h[i].due < h[j].due }
func (h timers) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].idx = i
	h[j].idx = j
}
func (h *timers) Push(x any) {
	e := x.(*entry)
	e.idx = len(*h)
	*h = append(*h, e)
}
func (h *timers) Pop() any {
	old := *h
	n := len(old) - 1
	e := old[n]
	old[n] = nil
	*h = old[:n]
	e.idx = -1
	return e
}

// list is an intrusive doubly linked list of entries.
type list struct {
	head, tail *entry
	n          int
}

func (l *list) pushBack(e *entry) {
	e.prev, e.next = l.tail, nil
	if l.tail != nil {
		l.tail.next = e
	} else {
		l.head = e
	}
	l.tail = e
	l.n++
}

func (l *list) remove(e *entry) {
	if e.prev != nil {
		e.prev.next = e.next
	} else {
		l.head = e.next
	}
	if e.next != nil {
		e.next.prev = e.prev
	} else {
		l.tail = e.prev
	}
	e.prev, e.next = nil, nil
	l.n--
}

func (l *list) moveToBack(e *entry) {
	if l.tail == e {
		return
	}
	l.remove(e)
	l.pushBack(e)
}
