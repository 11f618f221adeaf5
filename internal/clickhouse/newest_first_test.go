package clickhouse

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
	"github.com/eventgate/eventgate/internal/query"
)

// TestNewestFirstFromIndexMatchesEventsTable lists, newest first, events
// spread over 35 days (bursts, gaps, and a clock ahead: the windows the
// index is read in first fill, widen, or stay empty), with second versions, in two tenants and with
// filters, page by page, and checks that every listing whose keys come from
// analytics_events equals the one read from the events table alone, also as
// of resourceVersions before some events and versions were stored: with the
// keys always from the index, with the size probe refusing the events
// table (5 rows) and so falling back to the index, and with the default
// probe (this store is small: the events table).
func TestNewestFirstFromIndexMatchesEventsTable(t *testing.T) {
	eachTransport(t, func(t *testing.T, open func(Config) *Store) {
		cfg := DefaultConfig()
		cfg.Database = "" // the test's own
		s := open(cfg)
		s.probeRows = 0  // keys from the index
		old := open(cfg) // same database, events table only
		old.eventsOnly = true
		probed := open(cfg)
		probed.probeRows = 5
		auto := open(cfg)
		now := time.Now()
		// Half an hour in the future (a sender's clock ahead), a burst of
		// 18 events in 0.2 s six minutes ago (a window of candidates
		// fills), then sparser.
		hours := []float64{-0.5, 0.1, 0.10001, 0.10002, 0.10003, 0.10004, 0.10005,
			0.2, 1, 10, 47.9, 48, 48.1, 49, 60, 72.5, 80, 240, 24 * 35}
		var evs []*eventgatev1.Event
		for i, h := range hours {
			for j := range 3 {
				uid := string(rune('a'+i)) + string(rune('0'+j))
				ev := mkEvent(uid, 0, func(e *eventgatev1.Event) {
					e.EventTime = timestampAt(now.Add(-time.Duration(h * float64(time.Hour))).Add(time.Duration(j) * time.Millisecond))
				})
				if j == 1 {
					ev.Tenant = &eventgatev1.Tenant{Type: "project", Name: "b"}
				}
				if (i+j)%2 == 0 {
					ev.Type = "Warning"
				}
				evs = append(evs, ev)
			}
		}
		half := len(evs) / 2
		rvHalf := insert(t, s, 1, evs[:half]...)
		rv := insert(t, s, rvHalf+1, evs[half:]...)
		rvFirst := rv
		// Second versions of two events, one new and one 40 days old.
		for _, i := range []int{1, len(evs) - 4} {
			v2 := cloneEvent(evs[i])
			v2.Note = "second version"
			rv = insert(t, s, rv+1, v2)
		}
		if _, err := probed.listEvents(context.Background(), query.List{Scope: all, PageSize: 10}, rv, nil, 10,
			", max_rows_to_read = 5, read_overflow_mode = 'throw'"); err == nil || !tooManyRows(err) {
			t.Fatalf("a read of the events table over max_rows_to_read: %v, want the engine's refusal", err)
		}
		if !s.indexed(query.List{Scope: all}) || s.indexed(query.List{Scope: all, OldestFirst: true}) {
			t.Fatal("newest first of every tenant must read its keys from analytics_events, oldest first must not")
		}
		filters := map[string]query.Filter{
			"all":         {},
			"tenant b":    {Tenant: &query.TenantRef{Type: "project", Name: "b"}},
			"warning":     {Type: set("Warning")},
			"since 3d":    {Since: now.Add(-72 * time.Hour)},
			"since 30h":   {Since: now.Add(-30 * time.Hour)},
			"until 47h":   {Until: now.Add(-47 * time.Hour)},
			"until 49h":   {Until: now.Add(-49 * time.Hour)},
			"window 2-3d": {Since: now.Add(-72 * time.Hour), Until: now.Add(-47 * time.Hour), Type: set("Warning")},
		}
		for name, f := range filters {
			for _, at := range []uint64{rv, rvFirst, rvHalf} {
				for _, size := range []int{1, 100} {
					got := listUIDs(t, s, query.List{Scope: all, Filter: f, PageSize: size}, at)
					want := listUIDs(t, old, query.List{Scope: all, Filter: f, PageSize: size}, at)
					if !slices.Equal(got, want) {
						t.Errorf("%s at rv %d, pages of %d: got\n%v\nwant (events table)\n%v", name, at, size, got, want)
					}
					for pname, st := range map[string]*Store{"refused by the probe": probed, "default probe": auto} {
						if g := listUIDs(t, st, query.List{Scope: all, Filter: f, PageSize: size}, at); !slices.Equal(g, want) {
							t.Errorf("%s at rv %d, pages of %d, %s: got\n%v\nwant (events table)\n%v", name, at, size, pname, g, want)
						}
					}
					if name == "all" && at == rv && len(got) != len(evs) {
						t.Errorf("all: %d events listed, want %d: %v", len(got), len(evs), got)
					}
					if name == "all" && at == rvHalf && len(got) != half {
						t.Errorf("all at rv %d: %d events listed, want %d", at, len(got), half)
					}
				}
			}
		}
	})
}

// listUIDs pages through a listing; each event as uid@resourceVersion.
func listUIDs(t *testing.T, s *Store, q query.List, rv uint64) []string {
	t.Helper()
	var out []string
	for {
		p := listPage(t, s, q, rv)
		for _, e := range p.Events {
			out = append(out, e.GetUid()+"@"+e.GetResourceVersion()+"/"+strings.TrimPrefix(e.GetNote(), "second version"))
		}
		if p.NextPageToken == "" {
			return out
		}
		q.PageToken = p.NextPageToken
	}
}

func timestampAt(t time.Time) *timestamppb.Timestamp {
	return timestamppb.New(t.UTC().Truncate(time.Microsecond))
}

func cloneEvent(e *eventgatev1.Event) *eventgatev1.Event { return proto.Clone(e).(*eventgatev1.Event) }

// TestPrewarmReadsEmptyAndFilledStores: the read a store makes after open
// to warm the engine (prewarm.go) succeeds on a new, empty database and on
// one holding events, and Close ends it.
func TestPrewarmReadsEmptyAndFilledStores(t *testing.T) {
	eachTransport(t, func(t *testing.T, open func(Config) *Store) {
		cfg := DefaultConfig()
		cfg.Database = ""
		s := open(cfg)
		<-s.prewarmDone
		if s.prewarmErr != nil {
			t.Fatalf("prewarm of an empty store: %v", s.prewarmErr)
		}
		insert(t, s, 1, mkEvent("a", 1), mkEvent("b", 2))
		filled := open(cfg)
		<-filled.prewarmDone
		if filled.prewarmErr != nil {
			t.Fatalf("prewarm of a store with events: %v", filled.prewarmErr)
		}
		again := open(cfg)
		if err := again.Close(); err != nil {
			t.Fatal(err)
		}
		select {
		case <-again.prewarmDone:
		default:
			t.Fatal("Close returned before the prewarm ended")
		}
	})
}
