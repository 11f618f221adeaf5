// Package correlator groups similar core/v1 events the way client-go's
// EventCorrelator (its EventAggregator) does: events of one tenant with the
// same source, involved object, type and reason but different messages are
// "similar"; once MaxEvents distinct messages of a group were seen with no
// gap longer than MaxInterval between them, every further similar event is
// replaced by an aggregate whose note reads
// "(combined from similar events): <note>".
//
// It is an option of the core/v1 ingestion path (--k8s-core-correlate, off
// by default), for clients that expect kube-apiserver's older behaviour.
// Wiring (for internal/k8sapi): build one Correlator per gateway with New
// (Config from DefaultConfig, MaxNoteBytes from the gateway's event limits)
// and, on the core/v1 create path only, after converting the core/v1 Event
// and resolving its tenant, replace the event by
// c.Correlate(ev, time.Now()) before Emit. Events of events.k8s.io/v1, the
// webhooks and eventgate's own API are not correlated.
//
// How it composes with eventgate's server-side series: the series key
// (internal/series/key.go) already leaves note out, so similar events that
// differ only in their message fold into one series whether or not this
// option is on. What the option changes is what the stored event says: from
// the MaxEvents-th similar event on, the event is an aggregate (new uid and
// name, note prefixed, action, related, labels, annotations and metadata
// dropped, as client-go builds it), and the aggregates then fold into a series
// of their own on the server, which counts them as kube-apiserver's
// EventLogger would count client-go's aggregate. With --series=false every
// aggregate is stored as its own event.
//
// The correlator keeps bounded state (an LRU of CacheSize groups, each with at
// most MaxEvents message hashes) and is safe for concurrent use. It is
// per-process: behind several gateway replicas each counts what it receives,
// as each client-go process does.
package correlator

import (
	"container/list"
	"encoding/binary"
	"hash/maphash"
	"strings"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
	"github.com/eventgate/eventgate/internal/event"
)

// CombinedPrefix starts the note of an aggregate event, as in client-go.
const CombinedPrefix = "(combined from similar events): "

// Defaults of client-go's EventCorrelator.
const (
	DefaultMaxEvents   = 10
	DefaultMaxInterval = 10 * time.Minute
	DefaultCacheSize   = 4096
)

// Config tunes a Correlator. Zero fields take the defaults.
type Config struct {
	// MaxEvents is how many distinct messages of a group are seen before
	// events are aggregated (client-go: 10).
	MaxEvents int
	// MaxInterval resets a group when no similar event came for this long
	// (client-go: 10 minutes).
	MaxInterval time.Duration
	// CacheSize bounds the groups remembered, least recently used first out
	// (client-go: 4096).
	CacheSize int
	// MaxNoteBytes, when positive, bounds an aggregate's note: the note is
	// cut at a UTF-8 boundary so that prefix and note fit.
	MaxNoteBytes int
}

// DefaultConfig returns client-go's defaults.
func DefaultConfig() Config {
	return Config{MaxEvents: DefaultMaxEvents, MaxInterval: DefaultMaxInterval, CacheSize: DefaultCacheSize}
}

func (c Config) withDefaults() Config {
	if c.MaxEvents < 1 {
		c.MaxEvents = DefaultMaxEvents
	}
	if c.MaxInterval <= 0 {
		c.MaxInterval = DefaultMaxInterval
	}
	if c.CacheSize < 1 {
		c.CacheSize = DefaultCacheSize
	}
	return c
}

// Correlator aggregates similar events. The zero value is not usable; call New.
type Correlator struct {
	cfg  Config
	seed maphash.Seed

	mu    sync.Mutex
	lru   *list.List // of *record, most recently used at the front
	index map[string]*list.Element
}

// record is one group: the hashes of the distinct messages seen and when the
// last similar event came.
type record struct {
	key      string
	messages map[uint64]struct{}
	last     time.Time
}

// New returns a Correlator.
func New(cfg Config) *Correlator {
	return &Correlator{cfg: cfg.withDefaults(), seed: maphash.MakeSeed(), lru: list.New(), index: map[string]*list.Element{}}
}

// Len is the number of groups remembered.
func (c *Correlator) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lru.Len()
}

// Correlate records ev, observed at now, and returns the event to store:
// ev itself (not modified) while its group has seen fewer than MaxEvents
// distinct notes within MaxInterval of each other, else a new aggregate
// event. A nil ev is returned as is.
func (c *Correlator) Correlate(ev *eventgatev1.Event, now time.Time) *eventgatev1.Event {
	if ev == nil {
		return nil
	}
	key := Key(ev)
	msg := maphash.String(c.seed, ev.GetNote())

	c.mu.Lock()
	var r *record
	if el, ok := c.index[key]; ok {
		r = el.Value.(*record)
		c.lru.MoveToFront(el)
	} else {
		r = &record{key: key}
		c.index[key] = c.lru.PushFront(r)
		if c.lru.Len() > c.cfg.CacheSize {
			oldest := c.lru.Back()
			c.lru.Remove(oldest)
			delete(c.index, oldest.Value.(*record).key)
		}
	}
	// A group idle for longer than the interval starts over; so does a new
	// one (its zero time is long ago).
	if r.messages == nil || now.Sub(r.last) > c.cfg.MaxInterval {
		r.messages = make(map[uint64]struct{}, c.cfg.MaxEvents)
	}
	r.messages[msg] = struct{}{}
	r.last = now
	over := len(r.messages) >= c.cfg.MaxEvents
	if over {
		// Do not grow the set beyond the threshold (client-go pops any one).
		for h := range r.messages {
			delete(r.messages, h)
			break
		}
	}
	c.mu.Unlock()

	if !over {
		return ev
	}
	return c.aggregate(ev, now)
}

// aggregate builds the event that stands for ev once its group is over the
// threshold: what client-go's EventAggregator copies (object, type, reason,
// source) with a combined note, observed now.
func (c *Correlator) aggregate(ev *eventgatev1.Event, now time.Time) *eventgatev1.Event {
	agg := &eventgatev1.Event{
		Namespace:           ev.GetNamespace(),
		EventTime:           timestamppb.New(now.Truncate(time.Microsecond)),
		ReportingController: ev.GetReportingController(),
		ReportingInstance:   ev.GetReportingInstance(),
		Reason:              ev.GetReason(),
		Note:                c.combinedNote(ev.GetNote()),
		Type:                ev.GetType(),
	}
	if ev.GetRegarding() != nil {
		agg.Regarding = proto.Clone(ev.GetRegarding()).(*eventgatev1.ObjectReference)
	}
	if ev.GetTenant() != nil {
		agg.Tenant = proto.Clone(ev.GetTenant()).(*eventgatev1.Tenant)
	}
	return agg
}

func (c *Correlator) combinedNote(note string) string {
	if c.cfg.MaxNoteBytes > 0 {
		room := c.cfg.MaxNoteBytes - len(CombinedPrefix)
		if room < 0 {
			room = 0
		}
		note = event.TruncateUTF8(note, room)
	}
	return CombinedPrefix + note
}

// Key is the group of ev: its tenant, source (reportingController and
// reportingInstance, which a core/v1 event's source.component and source.host
// become), involved object (kind, namespace, name, uid, apiVersion), type and
// reason — client-go's EventAggregatorByReasonFunc plus the tenant. Every
// field is length-prefixed, so no two groups share a key.
func Key(ev *eventgatev1.Event) string {
	r := ev.GetRegarding()
	fields := [...]string{
		ev.GetTenant().GetType(), ev.GetTenant().GetName(),
		ev.GetReportingController(), ev.GetReportingInstance(),
		r.GetKind(), r.GetNamespace(), r.GetName(), r.GetUid(), r.GetApiVersion(),
		ev.GetType(), ev.GetReason(),
	}
	var b strings.Builder
	var n [binary.MaxVarintLen64]byte
	for _, f := range fields {
		b.Write(n[:binary.PutUvarint(n[:], uint64(len(f)))])
		b.WriteString(f)
	}
	return b.String()
}
