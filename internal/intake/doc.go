// Package intake aggregates event series on the server, across gateway
// replicas: every accepted occurrence is first logged durably in an intake
// stream partitioned by series key, and each partition of that log is
// folded into series by exactly one replica at a time, which stores the
// resulting writes in the events stream. It runs package series' pure
// aggregator and follows its protocol for the partition owner.
//
// # Submit
//
// Submit logs each occurrence in partition p = series.KeyOf(ev).Hash() %
// Partitions, subject "<prefix>.<p>" of the intake stream, with a reply
// subject and the trace context. An occurrence with a message id is an
// entry of its own under that id (the stream's duplicate window makes a
// retry with the same id a no-op, however it is batched: Outcome
// DUPLICATE). The occurrences without one share an entry per partition
// (HeaderBatch: up to 4,095 occurrences or 256 KiB), so that a batch costs
// the log, the connection and the owner a message per partition rather
// than one per occurrence; the aggregator sees occurrence k of entry seq at
// position seq<<12 | k. Once every publish is acknowledged the occurrences
// are durable and will be aggregated exactly once, whatever happens next. Submit then waits, at
// most DecisionTimeout, for the owners' decisions, which arrive over core
// NATS: CREATED and SERIES_STARTED (with the resourceVersion of the write)
// once that write is acknowledged by the events stream, SERIES_COUNTED at
// once. A decision that does not come in time leaves the result
// EMIT_OUTCOME_UNSPECIFIED: durable, not yet decided.
//
// # Ownership
//
// Each partition has a durable pull consumer (filter "<prefix>.<p>", deliver
// all, AckNone) with the pinned_client priority policy: every replica pulls
// in the consumer's priority group, and the server delivers to one pinned
// replica only, until it stops pulling for PinnedTTL; then the next entry
// pins another. A replica that receives an entry with a pin id it does not
// hold takes over:
//
//  1. It restores the partition's checkpoint from the KV bucket (series
//     Restore; New when there is none), noting the head's revision.
//  2. It claims the checkpoint: a compare-and-set of the head, at that
//     revision, naming itself. From then on a deposed owner's checkpoint
//     fails its compare-and-set: it is fenced off, and learns it lost the
//     partition (its next pull is refused with a pin mismatch, 423).
//  3. It rewinds the consumer to the entry after the checkpoint's last one
//     (the JetStream consumer reset API), discarding whatever the consumer
//     had delivered to the previous owner, and folds from there: Observe for an occurrence, Tick for a
//     tick entry, with the entry's stream sequence and timestamp.
//
// The aggregator must see the partition's entries in log order without a
// gap, and a consumer does not promise that on its own: a delivery can be
// lost (a pull given up on the client while the server still delivered to
// it, a reconnect), and a deposed owner may rewind the consumer late. So an
// entry is folded only when it provably follows the last one handled: it is
// the consumer's next first delivery (consecutive consumer sequence,
// NumDelivered 1), or a direct read of the stream finds no entry of the
// partition between the last entry folded and it. Otherwise the rest of
// the pull is discarded (its channel closes only when the server is done
// with the request) and the consumer rewound to the entry after the last
// one folded. Entries at or below it are skipped. (A checkpoint head records
// that entry's sequence, log_seq, beside the aggregator's position; a head
// written before batched entries has none, and its position is it.)
//
// # Writes, checkpoints, acknowledgements
//
// Writes go to the events stream in order, asynchronously, on the subject
// of event.SubjectOf with Nats-Msg-Id = Write.ID(), headers
// Eventgate-Write-Reason and Eventgate-Series-Minutes, and the intake
// entry's traceparent on the entry's own Created or Started write. Every
// CheckpointInterval (or CheckpointEntries entries) the owner snapshots
// its aggregator and goes on folding, while the checkpoint is written
// beside it (one at a time): once every write issued before the snapshot
// is acknowledged, its chunks are stored and the head compare-and-set.
// A failed write or a failed compare-and-set makes the owner check its pin
// and restore the checkpoint (steps 1–3) or give the partition up. The consumer acknowledges nothing (AckNone): a takeover
// rewinds it to the checkpoint anyway, so acknowledgements would say
// nothing the head does not, while AckAll would add redeliveries out of
// order, MaxAckPending stalls and, after a rewind, acknowledgements of a
// deposed owner that move the ack floor past the live one. The intake keeps
// entries by MaxAge only; it must cover a checkpoint interval plus a
// takeover. Writes replayed after a takeover are the same writes under the
// same ids, deduplicated by the events stream: its duplicate window must
// cover a checkpoint interval plus a takeover too (Start warns otherwise).
//
// Checkpoints are incremental (series.Checkpoint): each singleton is
// written once, in the segment of the checkpoint after its creation, and
// the head holds the series, the position and which segments still count.
// A checkpoint therefore costs what happened since the previous one, not
// the whole tracked state (at a high rate of distinct events, singletons
// are nearly all of it). A head snapshot that fits in one message is in the
// head itself; a larger one, and every segment, is written first in chunks
// ("chunk.<p>.<gen>.<i>", a fresh gen each), which the head names. Chunks
// no head names any more are purged from the bucket's stream after the
// next checkpoint (those of segments and head snapshots the new head
// dropped) or takeover (every chunk of the partition the claimed head does
// not name).
//
// # Ticks, liveness, balance
//
// Timers run on log time. When the wall clock passes NextDue() and nothing
// arrived, the owner puts a header-only tick entry in the partition (at most
// one in flight). A replica that finds a partition with no pinned owner
// (its owner died or stopped) for PinnedTTL puts a tick in it, which gets a
// replica pinned, and the partition's due finishes written. Replicas
// announce themselves on a core NATS subject and aim at their fair share of
// the partitions: below it a replica competes for every partition, at or
// above it only for unowned ones, and above it it hands one over now and
// then (checkpoint, unpin, tick). Stop hands every owned partition over the
// same way; a crash (the connection gone) leaves its partitions to be
// taken over from their last checkpoint when their pins expire.
//
// # Events aggregated by their emitter
//
// An event that arrives with its series set (a core/v1 client that counts
// by itself), or from SubmitAsIs (header Eventgate-As-Is: an emitter that
// counts its own series, as every Kubernetes client does) is not
// aggregated, but it still goes through its partition:
// its owner stores it as it is (reason "client", id
// "<tenant>/<uid>/intake-<seq>"), in log order with the partition's series
// writes, and the entry counts as a tick for the aggregator.
//
// # Requirements
//
// nats-server 2.14 or later (pinned priority groups, consumer reset). The
// events stream must exist before Start.
package intake
