package gateway

import (
	"testing"
	"time"

	"github.com/eventgate/eventgate/internal/gateway/config"
)

// TestEventsStreamRemembersWriteIDsOnlyAcrossATakeover checks the windows
// the two streams deduplicate in: with the intake, callers' ids are the
// intake stream's (at least --stream-duplicates) and the events stream
// remembers the owners' write ids only for a takeover's replay; without
// it, the events stream takes callers' ids for --stream-duplicates.
func TestEventsStreamRemembersWriteIDsOnlyAcrossATakeover(t *testing.T) {
	cfg := config.Default()
	cfg.NATS.Duplicates = 5 * time.Minute
	cfg.Series = true
	replay := cfg.Intake.ReplayWindow()
	if got := eventsStreamConfig(cfg).Duplicates; got != replay {
		t.Errorf("series on: events stream window %v, want the replay window %v", got, replay)
	}
	if replay >= cfg.NATS.Duplicates {
		t.Fatalf("replay window %v is not shorter than the callers' %v", replay, cfg.NATS.Duplicates)
	}
	cfg.Series = false
	if got := eventsStreamConfig(cfg).Duplicates; got != 5*time.Minute {
		t.Errorf("series off: events stream window %v, want --stream-duplicates 5m", got)
	}
}
