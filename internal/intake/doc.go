// Package intake aggregates event series on the server, across gateway
// replicas. Every accepted occurrence is first logged durably in the
// intake stream, partitioned by series key (Start, then its wait); each
// partition is folded by exactly one replica at a time (a pinned pull
// consumer), which runs package series' aggregator over the partition's
// log in order, stores the writes in the events stream through
// jetstream.Publisher, answers the call with what each occurrence became
// (in process when the call is its own), and checkpoints incrementally to
// a KV bucket so that another replica can take the partition over after a
// crash without losing or double-counting an acknowledged occurrence.
//
// The protocol (ownership and takeover, gap detection, checkpoints, ticks,
// balance, events aggregated by their emitter) is described, with a
// diagram, in docs/design/intake.md.
//
// Requires nats-server 2.14 or later (pinned priority groups, consumer
// reset). The events stream must exist before Start.
package intake
