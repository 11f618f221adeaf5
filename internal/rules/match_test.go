package rules

import (
	"math/rand/v2"
	"strconv"
	"testing"

	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
	"github.com/eventgate/eventgate/internal/event"
	"github.com/eventgate/eventgate/internal/query"
)

// TestMayPassIsTrueForEveryEventTheFilterMatches: the check on the
// encoding that spares a shard decoding an event is a necessary condition
// of Matches, for every label operator, and it rules out the events a
// required label excludes.
func TestMayPassIsTrueForEveryEventTheFilterMatches(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	values := []string{"", "a", "b"}
	ops := []string{"=", "==", "!=", "in", "notin", "exists", "!"}
	var ruledOut int
	for i := 0; i < 5000; i++ {
		ev := &eventgatev1.Event{Type: []string{"Normal", "Warning"}[rng.IntN(2)], Reason: "R", Labels: map[string]string{}}
		for _, k := range []string{"team", "app"} {
			if rng.IntN(3) > 0 {
				ev.Labels[k] = values[rng.IntN(len(values))]
			}
		}
		f := &query.Filter{}
		if rng.IntN(2) == 0 {
			f.Type.In = []string{"Warning"}
		}
		for range rng.IntN(3) {
			req := query.LabelReq{Key: []string{"team", "app"}[rng.IntN(2)], Op: ops[rng.IntN(len(ops))]}
			switch req.Op {
			case "=", "==", "!=":
				req.Values = []string{values[rng.IntN(len(values))]}
			case "in", "notin":
				req.Values = []string{values[rng.IntN(len(values))], values[rng.IntN(len(values))]}
			}
			f.Labels = append(f.Labels, req)
		}
		raw, err := event.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		may := mayPass(f, ev.GetType(), raw)
		if Matches(f, ev) && !may {
			t.Fatalf("event %d %v matches %+v, but the encoding's check rules it out", i, ev.Labels, f)
		}
		if !may {
			ruledOut++
		}
	}
	if ruledOut == 0 {
		t.Fatal("the check on the encoding ruled out no event")
	}
	// The bench's rules: a team label no event of the tenant has.
	raw, err := event.Marshal(&eventgatev1.Event{Type: "Warning", Labels: map[string]string{"team": "team-" + strconv.Itoa(3)}})
	if err != nil {
		t.Fatal(err)
	}
	f := &query.Filter{Type: query.StringSet{In: []string{"Warning"}}, Labels: []query.LabelReq{{Key: "team", Op: "=", Values: []string{"team-none"}}}}
	if mayPass(f, "Warning", raw) {
		t.Error("a Warning of team-3 may pass team=team-none")
	}
}
