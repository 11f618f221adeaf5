// Package series folds repeated, isomorphic events into event series, as the
// Kubernetes events KEP's EventRecorder does — but on the server, once for
// every emitter. It is the pure core: no I/O, no goroutines, no clock. The
// gateway runs one Aggregator per intake partition in the replica that owns
// the partition, feeds it the partition's durable log in order, publishes
// the writes it returns, and persists its Snapshot so that another replica
// can Restore it.
//
// # Semantics
//
// Two events are isomorphic when KeyOf gives them the same Key: the same
// tenant, regarding, related, action, reason, reportingController,
// reportingInstance and type. The note is not part of it.
//
//   - The first occurrence of a key is written as it is, a singleton
//     (Outcome Created, ReasonCreated), and its key is remembered for Window.
//   - A second occurrence at most Window after it (a gap of exactly Window
//     counts) rewrites the same event — the first occurrence's uid, name and
//     eventTime — with series {count: 2, lastObservedTime, state: Ongoing}
//     (SeriesStarted, ReasonStarted).
//   - Later occurrences only raise the count in memory (Counted, no write).
//     A series whose count changed is rewritten FlushInterval after its
//     previous write (ReasonFlush), and one that did not change after
//     Heartbeat (ReasonHeartbeat).
//   - An ongoing series with no occurrence for longer than FinishAfter gets a
//     final write with state Finished, its final count and lastObservedTime
//     (ReasonFinished), and is forgotten: the next isomorphic occurrence is a
//     new singleton with its own uid.
//
// A series write carries the latest occurrence's note, as the core/v1 event
// correlator updates the message of a deduplicated event; every other field
// is the first occurrence's. Each write also carries Minutes, the
// occurrences per minute since the previous write of the same uid, so that
// they sum, over all writes of a uid, to its count (a singleton's one write
// carries its one occurrence).
//
// # Time
//
// The aggregator never reads a clock. Every time it uses is log time: the
// timestamp the durable intake log gave the entry (a JetStream stream
// timestamp), passed to Observe and Tick. All replicas read the same
// timestamps, so replica clock skew cannot split or merge series, and an
// emitter's eventTime, however far in the past or future, only appears in
// the stored event. A log timestamp that goes back (a stream leader change
// between servers with skewed clocks) is taken as the latest one seen.
//
// Timers (flush, heartbeat, finish, a singleton's window closing) fire when
// an entry's log time reaches them: each Observe first handles everything
// due by its entry's time, so a busy partition needs nothing else. A quiet
// one needs ticks: entries in the partition's own log (so that they are
// ordered with its occurrences) that carry no occurrence, passed to Tick. NextDue says when the next write falls due; when the wall
// clock passes it and nothing has been consumed since, the owner publishes
// a tick to the partition (at most one in flight, and say at most one a
// second, since the tick's log time may be a little behind NextDue when the
// server's clock is behind the replica's). Any replica may publish ticks;
// extra ticks do nothing.
//
// # Determinism
//
// Because timers run on log time, Observe and Tick are a pure function of
// the aggregator's state and the entry. An aggregator restored from a
// snapshot at position P and fed the entries after P returns exactly the
// decisions and writes — same Write.ID, same content — that the original
// returned for them. This is what makes a crash at any point safe, without
// an outbox: whatever was published before the crash is published again,
// identically, and deduplicated by ID.
//
// # Protocol for the partition owner
//
//  1. Take over: a := RestoreCheckpoint(cfg, the partition's last persisted
//     head, a reader of its segments), or New(cfg) when there is none, and
//     a.SetReader(a reader of the partition's log by position). Consume the
//     partition's log from a.Position()+1 (entries at or below Position are
//     ignored anyway, so a durable consumer's redeliveries are harmless).
//  2. For each entry, in log order: Observe(ev, entry timestamp, entry
//     sequence), or Tick for a tick entry. An Observe that fails to read a
//     first occurrence back decided nothing: retry it, or restore. Publish the returned writes in
//     order to the events stream with Nats-Msg-Id = Write.ID(); publishes may
//     be asynchronous. Decision.Outcome and UID are the Emit result.
//  3. Checkpoint every so often (every few seconds, or every N entries):
//     wait until every publish issued so far is acknowledged, then persist
//     a.Checkpoint(): its new segment, then its head (a KV put;
//     compare-and-set on the revision read at takeover fences off a
//     deposed owner; a failed one means restoring the last head), then — only if the consumer is
//     durable with AckAll — acknowledge the log up to the snapshot's
//     Position. Never acknowledge an entry before a persisted snapshot covers
//     it, and never persist a snapshot before the writes it implies are
//     acknowledged by the events stream.
//
// Why a crash at any point neither loses nor double counts an acknowledged
// occurrence: the intake log holds every acknowledged occurrence, and it
// keeps every entry after the last persisted snapshot (its retention must
// cover the checkpoint interval plus a takeover). The next owner restores
// that snapshot, which counts exactly the entries up to its Position, skips
// redeliveries at or below it, and folds every later entry once. Every write
// the old owner published for those later entries is re-derived identically
// and deduplicated by the events stream (whose duplicate window must exceed
// the checkpoint interval plus the takeover time); writes it never
// published are published now. A write replayed outside the duplicate
// window would be stored again, an identical but older version, until the
// replay catches up: the window's bound is what prevents that. Sinks that add
// up Minutes key them by (Write.ID, minute), so that no copy counts twice.
// Two owners at once (a deposed one still running) emit the same writes for
// the same entries, deduplicated the same way.
//
// No FlushAll is offered, on purpose: a write that no log entry explains (a
// flush at shutdown) could not be re-derived after a crash before the next
// snapshot, and its ID would then name two different contents. A graceful
// handover is a checkpoint: the next owner continues the pending counts and
// flushes them when they fall due, on log time, as the old owner would have.
//
// Change Config at a handover only: entries replayed under a different
// Config than the one they were first folded under may be cut into writes
// differently, under the same IDs.
//
// # Memory bound
//
// A singleton is tracked as its key's 128-bit hash, log time and log
// position (about 130 bytes of heap, in structures without pointers); its
// event is in the log, and is read back (Reader) when a second occurrence
// starts the series, unless it is still in a ring of the most recent
// encodings. An ongoing series keeps its first event decoded. Config.MaxBytes
// is the budget of all of it (Stats.Bytes). A new key over the budget first
// forgets the oldest singleton (it is stored already, nothing is lost; if
// its key recurs within Window it becomes a new singleton instead of
// starting a series), counted in Stats.EvictedSingletons. When every
// tracked key is a series, the least recently observed series is finished
// early with its exact count (ReasonEvicted, state Finished), counted in
// Stats.Writes[ReasonEvicted]; its key's next occurrence starts anew.
// Counts are never dropped. The caller logs and meters both. A series whose
// count reaches the int32 limit is finished (ReasonFinished) the same way
// before its next occurrence starts a new one.
//
// # Snapshots and positions
//
// Positions are the log's sequence numbers (JetStream stream sequences,
// starting at 1), increasing from entry to entry of one partition. The
// snapshot keeps one position for the whole aggregator, not one per key: a
// per-key position would be lost with a forgotten key, and a redelivery of
// one of its entries would then be counted again as a new singleton. A
// checkpoint holds each singleton as a 32-byte record (hash, time,
// position) and each series' first event, latest note, count, times, write
// sequence and the per-minute counts not yet written; it is protobuf wire
// format (see checkpoint.go).
package series
