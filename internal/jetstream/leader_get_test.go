package jetstream

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/eventgate/eventgate/internal/natstest"
)

// serverJetStream starts a JetStream server for the test and returns a
// context bounding it and a JetStream client of the server.
func serverJetStream(t *testing.T) (context.Context, jetstream.JetStream) {
	t.Helper()
	s := natstest.StartServer(t)
	nc, js := natstest.Connect(t, s.ClientURL())
	t.Cleanup(nc.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx, js
}

// LeaderGet selects a message by sequence, as the first on a subject at
// or after a sequence, or as the last on a subject, with its subject,
// headers and data; nothing selected is ErrMsgNotFound.
func TestLeaderGetSelectsBySequenceAndSubject(t *testing.T) {
	ctx, js := serverJetStream(t)
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "LG", Subjects: []string{"lg.>"}, AllowDirect: true}); err != nil {
		t.Fatal(err)
	}
	for i, subj := range []string{"lg.a", "lg.b", "lg.a"} {
		m := nats.NewMsg(subj)
		m.Data = fmt.Appendf(nil, "m%d", i+1)
		m.Header.Set("X-N", fmt.Sprint(i+1))
		if _, err := js.PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		q    MsgQuery
		seq  uint64
		subj string
	}{
		{MsgQuery{Seq: 2}, 2, "lg.b"},
		{MsgQuery{Seq: 1, NextBySubject: "lg.b"}, 2, "lg.b"},
		{MsgQuery{Seq: 2, NextBySubject: "lg.a"}, 3, "lg.a"},
		{MsgQuery{Seq: 1, NextBySubject: "lg.>"}, 1, "lg.a"},
		{MsgQuery{LastBySubject: "lg.a"}, 3, "lg.a"},
	} {
		m, err := LeaderGet(ctx, js, "LG", c.q)
		if err != nil {
			t.Fatalf("%+v: %v", c.q, err)
		}
		if m.Sequence != c.seq || m.Subject != c.subj || string(m.Data) != fmt.Sprintf("m%d", c.seq) || m.Header.Get("X-N") != fmt.Sprint(c.seq) || m.Time.IsZero() {
			t.Fatalf("%+v: got %d %s %q %v %v, want %d %s", c.q, m.Sequence, m.Subject, m.Data, m.Header, m.Time, c.seq, c.subj)
		}
	}
	for _, q := range []MsgQuery{{Seq: 4}, {Seq: 3, NextBySubject: "lg.b"}, {LastBySubject: "lg.c"}} {
		if _, err := LeaderGet(ctx, js, "LG", q); !errors.Is(err, jetstream.ErrMsgNotFound) {
			t.Fatalf("%+v: got %v, want ErrMsgNotFound", q, err)
		}
	}
	if _, err := LeaderGet(ctx, js, "NOSUCH", MsgQuery{Seq: 1}); err == nil || errors.Is(err, jetstream.ErrMsgNotFound) {
		t.Fatalf("a stream that does not exist: got %v, want an error other than not found", err)
	}
}

// LeaderKVGet returns a key's value and revision, and ErrKeyNotFound for
// a key never written, deleted or purged.
func TestLeaderKVGetSeesDeletesAndPurges(t *testing.T) {
	ctx, js := serverJetStream(t)
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "lgkv"})
	if err != nil {
		t.Fatal(err)
	}
	notFound := func(what string) {
		t.Helper()
		if _, _, err := LeaderKVGet(ctx, js, "lgkv", "k"); !errors.Is(err, jetstream.ErrKeyNotFound) {
			t.Fatalf("%s: got %v, want ErrKeyNotFound", what, err)
		}
	}
	notFound("never written")
	for i, end := range []func() error{
		func() error { return kv.Delete(ctx, "k") },
		func() error { return kv.Purge(ctx, "k") },
	} {
		rev, err := kv.Put(ctx, "k", fmt.Appendf(nil, "v%d", i))
		if err != nil {
			t.Fatal(err)
		}
		v, got, err := LeaderKVGet(ctx, js, "lgkv", "k")
		if err != nil || string(v) != fmt.Sprintf("v%d", i) || got != rev {
			t.Fatalf("after put: %q at %d, %v; want v%d at %d", v, got, err, i, rev)
		}
		if err := end(); err != nil {
			t.Fatal(err)
		}
		notFound([]string{"deleted", "purged"}[i])
	}
}

// Through a node that was lost and has just come back, and may still be
// catching up with the stream, LeaderGet finds each write as soon as it is
// acknowledged: the leader answers it, not the node the client is on.
func TestLeaderGetThroughARestartedNodeSeesEveryAcknowledgedWrite(t *testing.T) {
	cl := natstest.StartCluster(t, 3)
	nc, js := natstest.Connect(t, cl.Servers[0].ClientURL()+","+cl.Servers[1].ClientURL())
	defer nc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "LGR", Subjects: []string{"lgr.>"}, Replicas: 3, AllowDirect: true}); err != nil {
		t.Fatal(err)
	}
	cl.Stop(2)
	for i := range 500 {
		if _, err := js.Publish(ctx, "lgr.x", fmt.Appendf(nil, "%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	cl.Restart(t, 2)
	rnc, rjs := natstest.Connect(t, cl.Servers[2].ClientURL())
	defer rnc.Close()
	rs, err := rjs.Stream(ctx, "LGR")
	if err != nil {
		t.Fatal(err)
	}
	stale := 0
	for i := range 200 {
		ack, err := js.Publish(ctx, "lgr.y", fmt.Appendf(nil, "%d", i))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := rs.GetMsg(ctx, ack.Sequence); err != nil {
			stale++ // a direct get, answered by whichever replica
		}
		m, err := LeaderGet(ctx, rjs, "LGR", MsgQuery{LastBySubject: "lgr.y"})
		if err != nil || m.Sequence != ack.Sequence {
			t.Fatalf("write %d acknowledged at %d: the leader get through the restarted node returned %+v, %v", i, ack.Sequence, m, err)
		}
	}
	t.Logf("direct gets through the restarted node that missed an acknowledged write: %d of 200", stale)
}
