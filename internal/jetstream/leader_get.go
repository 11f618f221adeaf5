package jetstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// MsgQuery selects the message LeaderGet reads: the one at Seq; with
// NextBySubject, the first at or after Seq on that subject (filter); with
// LastBySubject, the last on that subject.
type MsgQuery struct {
	Seq           uint64 `json:"seq,omitempty"`
	NextBySubject string `json:"next_by_subj,omitempty"`
	LastBySubject string `json:"last_by_subj,omitempty"`
}

// errCodeMsgNotFound is JetStream's error code for "no message found".
const errCodeMsgNotFound = 10037

// LeaderGet reads one message of stream as the stream's leader holds it.
// A stream that allows direct gets (as ours do, and every key-value
// bucket) lets any of its replicas answer them, one that lags the stream
// included: it may miss writes already acknowledged. A read that must see
// every acknowledged write asks the leader. No message selected is
// jetstream.ErrMsgNotFound.
func LeaderGet(ctx context.Context, js jetstream.JetStream, stream string, q MsgQuery) (*jetstream.RawStreamMsg, error) {
	req, err := json.Marshal(q)
	if err != nil {
		return nil, fmt.Errorf("stream %s: get message: %w", stream, err)
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, defaultAPITimeout(js))
		defer cancel()
	}
	m, err := js.Conn().RequestWithContext(ctx, apiPrefix(js)+"STREAM.MSG.GET."+stream, req)
	if err != nil {
		return nil, fmt.Errorf("stream %s: get message: %w", stream, err)
	}
	var resp struct {
		Error *struct {
			Code        int    `json:"code"`
			ErrCode     int    `json:"err_code"`
			Description string `json:"description"`
		} `json:"error"`
		Message *struct {
			Subject  string    `json:"subject"`
			Sequence uint64    `json:"seq"`
			Header   []byte    `json:"hdrs"`
			Data     []byte    `json:"data"`
			Time     time.Time `json:"time"`
		} `json:"message"`
	}
	if err := json.Unmarshal(m.Data, &resp); err != nil {
		return nil, fmt.Errorf("stream %s: get message: %w", stream, err)
	}
	switch {
	case resp.Error != nil && resp.Error.ErrCode == errCodeMsgNotFound:
		return nil, jetstream.ErrMsgNotFound
	case resp.Error != nil:
		return nil, fmt.Errorf("stream %s: get message: %s (%d)", stream, resp.Error.Description, resp.Error.ErrCode)
	case resp.Message == nil:
		return nil, fmt.Errorf("stream %s: get message: %w", stream, jetstream.ErrInvalidJetStreamResponse)
	}
	out := &jetstream.RawStreamMsg{Subject: resp.Message.Subject, Sequence: resp.Message.Sequence, Data: resp.Message.Data, Time: resp.Message.Time}
	if len(resp.Message.Header) > 0 {
		if out.Header, err = nats.DecodeHeadersMsg(resp.Message.Header); err != nil {
			return nil, fmt.Errorf("stream %s: get message %d: headers: %w", stream, out.Sequence, err)
		}
	}
	return out, nil
}

// LeaderKVGet reads key of bucket as the bucket's leader holds it (see
// LeaderGet): its value and revision, jetstream.ErrKeyNotFound when it is
// absent, deleted or purged.
func LeaderKVGet(ctx context.Context, js jetstream.JetStream, bucket, key string) ([]byte, uint64, error) {
	m, err := LeaderGet(ctx, js, "KV_"+bucket, MsgQuery{LastBySubject: "$KV." + bucket + "." + key})
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, 0, fmt.Errorf("bucket %s: %s: %w", bucket, key, jetstream.ErrKeyNotFound)
	}
	if err != nil {
		return nil, 0, err
	}
	switch m.Header.Get("KV-Operation") {
	case "DEL", "PURGE":
		return nil, 0, fmt.Errorf("bucket %s: %s: %w", bucket, key, jetstream.ErrKeyNotFound)
	}
	return m.Data, m.Sequence, nil
}

// apiPrefix is the subject prefix of js's JetStream API requests.
func apiPrefix(js jetstream.JetStream) string {
	o := js.Options()
	switch {
	case o.APIPrefix != "":
		return strings.TrimSuffix(o.APIPrefix, ".") + "."
	case o.Domain != "":
		return "$JS." + o.Domain + ".API."
	}
	return jetstream.DefaultAPIPrefix
}

func defaultAPITimeout(js jetstream.JetStream) time.Duration {
	if t := js.Options().DefaultTimeout; t > 0 {
		return t
	}
	return 5 * time.Second
}
