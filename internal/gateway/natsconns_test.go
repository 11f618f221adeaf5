package gateway

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
)

// Each data path reads and writes on a socket of its own, and the rules'
// traffic does not share the control connection (the intake owners'
// fetches): a rule written through the API is a message from the rules'
// connection.
func TestEachDataPathHasItsOwnNATSConnection(t *testing.T) {
	tg := startGateway(t, nil)
	conns := func() map[string]*server.ConnInfo {
		t.Helper()
		cz, err := tg.ns.Connz(&server.ConnzOptions{Limit: 100})
		if err != nil {
			t.Fatalf("connz: %v", err)
		}
		out := map[string]*server.ConnInfo{}
		for _, c := range cz.Conns {
			if _, dup := out[c.Name]; dup {
				t.Errorf("two connections named %q", c.Name)
			}
			out[c.Name] = c
		}
		return out
	}
	before := conns()
	for _, name := range []string{"eventgate-gateway", "eventgate-emit", "eventgate-write", "eventgate-watch", "eventgate-ingest", "eventgate-rules"} {
		if before[name] == nil {
			t.Fatalf("no connection %q; have %v", name, keys(before))
		}
	}
	if before["eventgate-rules"].NumSubs == 0 {
		t.Errorf("the rules' connection holds no subscription: the rules' store does not watch through it")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c := eventgatev1.NewRulesServiceClient(tg.conn)
	if _, err := c.CreateRule(ctx, &eventgatev1.CreateRuleRequest{Rule: &eventgatev1.Rule{
		Name: "r", Tenant: &eventgatev1.Tenant{Type: "project", Name: "p"},
		Condition:   &eventgatev1.Condition{Kind: &eventgatev1.Condition_Every{Every: &eventgatev1.EveryCondition{}}},
		Destination: &eventgatev1.Destination{Kind: &eventgatev1.Destination_Webhook{Webhook: &eventgatev1.WebhookDestination{Url: "https://example.com/h", Secret: ruleSecret}}},
	}}); err != nil {
		t.Fatalf("create rule: %v", err)
	}
	after := conns()
	if got, was := after["eventgate-rules"].InMsgs, before["eventgate-rules"].InMsgs; got <= was {
		t.Errorf("the rules' connection sent %d messages before the rule was created and %d after: the rule was not written through it", was, got)
	}
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
