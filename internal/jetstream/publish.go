package jetstream

import (
	"context"
	"fmt"
	"sync"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/propagation"

	"github.com/eventgate/eventgate/internal/event"
	"github.com/eventgate/eventgate/internal/jetstream/wire"
)

// Publisher is the one writer of the events stream: it turns a wire.Write
// into its message (subject, message id, write reason, series minutes,
// trace context) and publishes it asynchronously.
type Publisher struct {
	js jetstream.JetStream
}

// NewPublisher returns a publisher of the events stream through js.
func NewPublisher(js jetstream.JetStream) *Publisher {
	return &Publisher{js: js}
}

var traceContext = propagation.TraceContext{}

// Msg is w's message.
func Msg(w wire.Write) (*nats.Msg, error) {
	m := nats.NewMsg("")
	if err := fill(m, w); err != nil {
		return nil, err
	}
	return m, nil
}

// msgs holds messages of writes whose acknowledgement came (Release):
// each write's message, with its header map, is one of the larger
// allocations per event on the write path.
var msgs = sync.Pool{New: func() any { return nats.NewMsg("") }}

// fill makes m, whose header map is empty, w's message.
func fill(m *nats.Msg, w wire.Write) error {
	data := w.Data
	if data == nil {
		var err error
		if data, err = event.Marshal(w.Event); err != nil {
			return err
		}
	}
	m.Subject = event.SubjectOf(w.Event)
	m.Data = data
	// The keys are constants in the canonical form Header.Get looks up
	// (TestWriteMessageCarriesEveryHeader reads each back with Get): set
	// directly, without Header.Set canonicalizing them at every write.
	if w.ID != "" {
		m.Header[jetstream.MsgIDHeader] = []string{w.ID}
	}
	if w.Reason != "" {
		m.Header[wire.HeaderWriteReason] = []string{w.Reason}
	}
	if len(w.Minutes) > 0 {
		m.Header[wire.HeaderSeriesMinutes] = []string{wire.FormatMinutes(w.Minutes)}
	}
	if w.Trace != nil {
		traceContext.Inject(w.Trace, propagation.HeaderCarrier(m.Header))
	}
	return nil
}

// Async publishes w and returns the future of its acknowledgement. Once
// the future has given its acknowledgement or its error, Release may take
// its message back.
func (p *Publisher) Async(w wire.Write) (jetstream.PubAckFuture, error) {
	m := msgs.Get().(*nats.Msg)
	if err := fill(m, w); err != nil {
		Release(m)
		return nil, fmt.Errorf("publish write %s: %w", w.ID, err)
	}
	// No Nats-Expected-Stream header: the server stores it with every
	// message (28 bytes a write), and it guards nothing here, since no two
	// streams of an account may capture one subject: the stream that
	// acknowledges an events subject is the events stream.
	f, err := p.js.PublishMsgAsync(m)
	if err != nil {
		// The client may hold it still (a publish that failed after
		// its future was registered): not reused.
		return nil, fmt.Errorf("publish write %s: %w", w.ID, err)
	}
	return f, nil
}

// Release takes back the message of a write that Async published, once
// its future has given the acknowledgement or the error: the client is
// done with it then (it resolves a future once, and keeps nothing of its
// message after). The message must not be used after. A nil message is
// ignored.
func Release(m *nats.Msg) {
	if m == nil {
		return
	}
	clear(m.Header)
	h := m.Header
	*m = nats.Msg{Header: h}
	msgs.Put(m)
}

// Start publishes ws, after those of every Start before it; wait, called
// once, returns their acknowledgements in order once all are durable. On an
// error some writes may have been stored: a retry with the same ids is
// deduplicated by the stream.
func (p *Publisher) Start(ws []wire.Write) (wait func(context.Context) ([]wire.Ack, error), err error) {
	futures := make([]jetstream.PubAckFuture, len(ws))
	for i, w := range ws {
		if futures[i], err = p.Async(w); err != nil {
			return nil, err
		}
	}
	return func(ctx context.Context) ([]wire.Ack, error) {
		return awaitReleased(ctx, futures)
	}, nil
}

// Publish publishes ready-made messages and waits for their
// acknowledgements: for tests and tools that write the stream as another
// writer would.
func (p *Publisher) Publish(ctx context.Context, msgs []*nats.Msg) ([]wire.Ack, error) {
	futures := make([]jetstream.PubAckFuture, len(msgs))
	for i, m := range msgs {
		f, err := p.js.PublishMsgAsync(m)
		if err != nil {
			return nil, fmt.Errorf("publish %s: %w", m.Subject, err)
		}
		futures[i] = f
	}
	return awaitAll(ctx, futures)
}

func awaitAll(ctx context.Context, futures []jetstream.PubAckFuture) ([]wire.Ack, error) {
	acks := make([]wire.Ack, len(futures))
	for i, f := range futures {
		select {
		case ack := <-f.Ok():
			acks[i] = wire.Ack{Sequence: ack.Sequence, Duplicate: ack.Duplicate}
		case err := <-f.Err():
			return nil, fmt.Errorf("publish %s: %w", f.Msg().Subject, err)
		case <-ctx.Done():
			return nil, fmt.Errorf("publish: %w", ctx.Err())
		}
	}
	return acks, nil
}

// awaitReleased is awaitAll for futures of Async: each message is
// released once every future has resolved (those of a failed wait are
// left to the collector).
func awaitReleased(ctx context.Context, futures []jetstream.PubAckFuture) ([]wire.Ack, error) {
	acks, err := awaitAll(ctx, futures)
	if err != nil {
		return nil, err
	}
	for _, f := range futures {
		Release(f.Msg())
	}
	return acks, nil
}
