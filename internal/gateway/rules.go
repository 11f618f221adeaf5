package gateway

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/types/known/timestamppb"

	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
	"github.com/eventgate/eventgate/internal/authz"
	"github.com/eventgate/eventgate/internal/notify"
	"github.com/eventgate/eventgate/internal/rules"
	"github.com/eventgate/eventgate/internal/service"
)

// The rules (issue 21) are wired here, apart from gateway.go: the store,
// the engine that evaluates the shards this replica owns, the dispatcher
// that delivers their notifications, and the RulesService.
type rulesParts struct {
	store  *rules.Store
	engine *rules.Engine
	disp   *notify.Dispatcher
	svc    *service.Rules
}

// startRules starts the rules on their own connection. g.events must be
// built: a rule paused for a failing destination is told as an event.
func (g *Gateway) startRules(ctx context.Context) error {
	cfg := g.cfg.Rules
	cfg.EventsStream = g.cfg.NATS.Stream
	cfg.ReplicaID = g.replica.ID
	cfg.Replicas = g.cfg.NATS.Replicas
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var err error
	p := &g.rules
	if p.store, err = rules.OpenStore(sctx, g.paths.rules.js, cfg.RulesBucket, cfg.Replicas, g.log); err != nil {
		return err
	}
	if p.engine, err = rules.Start(sctx, g.paths.rules.js, g.hub, p.store, cfg, g.log); err != nil {
		return err
	}
	engine := p.engine
	g.registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "eventgate_rules_evaluated",
		Help: "Rules this replica evaluates: the shards it owns have taken them in.",
	}, func() float64 { return float64(engine.Evaluating()) }))
	ncfg := g.cfg.Notify
	ncfg.Replicas = cfg.Replicas
	if p.disp, err = notify.Start(sctx, g.paths.rules.js, g.paths.rules.nc, p.engine, p.store, ncfg, g.rulePaused, g.log); err != nil {
		return err
	}
	disp := p.disp
	g.registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "eventgate_notify_queues_served",
		Help: "Rules whose delivery queue this replica serves: rules of the shards it owns that have notified at least once and are not paused.",
	}, func() float64 { return float64(disp.Serving()) }))
	p.svc = service.NewRules(p.store, p.disp, g.log)
	return nil
}

// rulePaused emits a Warning event into the rule's tenant: its destination
// kept failing and the rule is paused until someone resumes it.
func (g *Gateway) rulePaused(ctx context.Context, r *rules.Rule, reason string) {
	ev := &eventgatev1.Event{
		Type: "Warning", Reason: "RulePaused", Action: "Pause", Note: reason,
		EventTime:           timestamppb.Now(),
		ReportingController: "eventgate.io/rules", ReportingInstance: g.replica.ID,
		Regarding: &eventgatev1.ObjectReference{ApiVersion: "eventgate.io/v1", Kind: "Rule", Name: r.Name},
		Tenant:    &eventgatev1.Tenant{Type: r.Tenant.Type, Name: r.Tenant.Name},
	}
	ectx := authz.NewContext(ctx, &authz.Principal{Name: "eventgate-rules", Admin: true})
	if _, err := g.events.Emit(ectx, &eventgatev1.EmitRequest{Events: []*eventgatev1.Event{ev}}); err != nil {
		g.log.Warn("rules: event about a paused rule", "rule", r.ID(), "err", fmt.Errorf("emit: %w", err))
	}
}

// stopRules hands the owned shards over and stops delivering.
func (g *Gateway) stopRules() {
	p := &g.rules
	if p.disp != nil {
		p.disp.Stop()
	}
	if p.engine != nil {
		p.engine.Stop()
	}
	if p.store != nil {
		p.store.Close()
	}
}
