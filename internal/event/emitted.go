package event

import eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"

// Emitted says what became of one emitted occurrence that the series
// aggregation took in.
type Emitted struct {
	// Outcome: CREATED, SERIES_STARTED, SERIES_COUNTED, DUPLICATE (a retry
	// of a message id logged before: logged once, decided for the first
	// emit), or EMIT_OUTCOME_UNSPECIFIED when the occurrence is durable but
	// what it became was not known in time. It will be aggregated all the
	// same.
	Outcome eventgatev1.EmitOutcome
	// UID of the stored event the occurrence is part of: its own for
	// CREATED, the series' for SERIES_STARTED and SERIES_COUNTED; the
	// occurrence's own uid otherwise.
	UID string
	// SeriesUID is the series' uid for SERIES_STARTED and SERIES_COUNTED.
	SeriesUID string
	// ResourceVersion is the events stream sequence of the write the
	// occurrence caused (CREATED, SERIES_STARTED); 0 when it was only
	// counted or is undecided.
	ResourceVersion uint64
}
