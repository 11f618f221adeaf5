package jetstream

import (
	"context"
	"fmt"

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
	data := w.Data
	if data == nil {
		var err error
		if data, err = event.Marshal(w.Event); err != nil {
			return nil, err
		}
	}
	m := nats.NewMsg(event.SubjectOf(w.Event))
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
	return m, nil
}

// Async publishes w and returns the future of its acknowledgement.
func (p *Publisher) Async(w wire.Write) (jetstream.PubAckFuture, error) {
	m, err := Msg(w)
	if err != nil {
		return nil, fmt.Errorf("publish write %s: %w", w.ID, err)
	}
	// No Nats-Expected-Stream header: the server stores it with every
	// message (28 bytes a write), and it guards nothing here, since no two
	// streams of an account may capture one subject: the stream that
	// acknowledges an events subject is the events stream.
	f, err := p.js.PublishMsgAsync(m)
	if err != nil {
		return nil, fmt.Errorf("publish write %s: %w", w.ID, err)
	}
	return f, nil
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
		return awaitAll(ctx, futures)
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
