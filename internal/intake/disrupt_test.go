package intake

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// TestDisruptions disturbs the owner of the only partition while series
// flow: its consumer is rewound behind it and skipped ahead of it (what a
// deposed owner's late rewind, or a lost delivery, looks like), and its pin
// is taken away. The owner must notice every gap, and the counts must stay
// exact.
func TestDisruptions(t *testing.T) {
	ns := startServer(t)
	cfg := loadConfig()
	cfg.Partitions = 1
	r := startReplica(t, ns, "", "a", cfg)
	ctx := context.Background()
	st, err := r.js.Stream(ctx, cfg.Stream)
	if err != nil {
		t.Fatal(err)
	}
	lastSeq := func() uint64 {
		info, err := st.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return info.State.LastSeq
	}
	const perSeries = 400
	disruptions := []func() error{
		func() error {
			// Skip ahead: the next 50 entries would be lost. At most two
			// batches (40 entries) are in flight, so some of the 50 ticks
			// put in the log are surely skipped.
			if _, err := st.ResetConsumerToSequence(ctx, consumerName(0), lastSeq()+51); err != nil {
				return err
			}
			for range 50 {
				m := nats.NewMsg(cfg.subject(0))
				m.Header.Set(HeaderTick, "1")
				if _, err := r.js.PublishMsg(ctx, m); err != nil {
					return err
				}
			}
			return nil
		},
		func() error { // rewind behind the owner
			_, err := st.ResetConsumerToSequence(ctx, consumerName(0), max(lastSeq(), 500)-400)
			return err
		},
		func() error { // the pin moves
			return st.UnpinConsumer(ctx, consumerName(0), ownerGroup)
		},
	}
	l := emit(t, []*replica{r}, 20, perSeries, 2, func(b int) {
		if i := b/100 - 1; b%100 == 0 && i >= 0 && i < len(disruptions) {
			if err := disruptions[i](); err != nil {
				t.Errorf("disruption %d: %v", i, err)
			}
		}
	})
	events := checkSeries(t, r.js, l, 60*time.Second)
	s := r.in.Stats()
	t.Logf("events %d, stats %+v", events, s)
	if s.Resyncs == 0 {
		t.Error("no resync: the skip went unnoticed")
	}
	if s.Takeovers < 2 {
		t.Errorf("%d takeovers, want one more after the pin moved", s.Takeovers)
	}
}
