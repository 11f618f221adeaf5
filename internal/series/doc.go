// Package series folds repeated, isomorphic events into event series, as
// the Kubernetes events KEP's EventRecorder does, but on the server, once
// for every emitter. It is the pure core: no goroutines, no clock, and no
// I/O but reading a first occurrence back from the log (Reader). An
// Aggregator folds one partition's log: Observe an occurrence or Tick,
// with the log's timestamp and position, and publish the Writes it
// returns in order with Write.ID as the message id.
//
// Timers run on log time, so an aggregator restored from a Checkpoint and
// fed the log after it returns exactly the writes, under the same ids, that
// the original returned: a crash at any point is safe without an outbox,
// since what was published before is published again and deduplicated by
// id. A singleton is tracked as its key's 128-bit hash and log position
// (about 85 bytes); Config.MaxBytes is the memory budget of all that is
// tracked.
//
// Semantics, the owner's protocol, the memory bound and the checkpoint
// format are described, with diagrams, in docs/design/series.md.
package series
