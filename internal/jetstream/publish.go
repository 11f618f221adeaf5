package jetstream

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Publisher publishes batches of messages to the events stream and waits for
// every acknowledgement.
type Publisher struct {
	js     jetstream.JetStream
	stream string
}

// NewPublisher returns a publisher for stream.
func NewPublisher(js jetstream.JetStream, stream string) *Publisher {
	return &Publisher{js: js, stream: stream}
}

// Publish sends msgs asynchronously and returns their acknowledgements in
// order once all are durable. On error some messages may have been stored;
// a retry with the same message ids is deduplicated by the stream.
func (p *Publisher) Publish(ctx context.Context, msgs []*nats.Msg) ([]*jetstream.PubAck, error) {
	wait, err := p.Start(msgs)
	if err != nil {
		return nil, err
	}
	return wait(ctx)
}

// Start is Publish in two halves: Start sends msgs, so that the messages of
// calls started one after another are stored in that order; wait, called
// once, returns their acknowledgements as Publish does.
func (p *Publisher) Start(msgs []*nats.Msg) (wait func(context.Context) ([]*jetstream.PubAck, error), err error) {
	futures := make([]jetstream.PubAckFuture, len(msgs))
	for i, m := range msgs {
		f, err := p.js.PublishMsgAsync(m, jetstream.WithExpectStream(p.stream))
		if err != nil {
			return nil, fmt.Errorf("publish %s: %w", m.Subject, err)
		}
		futures[i] = f
	}
	return func(ctx context.Context) ([]*jetstream.PubAck, error) {
		acks := make([]*jetstream.PubAck, len(msgs))
		for i, f := range futures {
			select {
			case ack := <-f.Ok():
				acks[i] = ack
			case err := <-f.Err():
				return nil, fmt.Errorf("publish %s: %w", msgs[i].Subject, err)
			case <-ctx.Done():
				return nil, fmt.Errorf("publish: %w", ctx.Err())
			}
		}
		return acks, nil
	}, nil
}
