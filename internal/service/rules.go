package service

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
	"github.com/eventgate/eventgate/internal/authz"
	"github.com/eventgate/eventgate/internal/event"
	"github.com/eventgate/eventgate/internal/notify/delivery"
	"github.com/eventgate/eventgate/internal/query"
	"github.com/eventgate/eventgate/internal/rules/rule"
	"github.com/eventgate/eventgate/internal/selector"
)

// RuleStore keeps rules (internal/rules implements it).
type RuleStore interface {
	Create(ctx context.Context, r *rule.Rule) (*rule.Rule, error)
	Get(ctx context.Context, t rule.Tenant, name string) (*rule.Rule, error)
	List(ctx context.Context, t rule.Tenant) ([]*rule.Rule, error)
	Update(ctx context.Context, r *rule.Rule, rev uint64) (*rule.Rule, error)
	Delete(ctx context.Context, t rule.Tenant, name string) error
}

// DeliveryLog reads rules' deliveries and redelivers (internal/notify
// implements it).
type DeliveryLog interface {
	Deliveries(ctx context.Context, ruleUID string, limit int) ([]delivery.Delivery, error)
	Redeliver(ctx context.Context, ruleUID, notificationID string) error
}

// Rules implements RulesService.
type Rules struct {
	eventgatev1.UnimplementedRulesServiceServer
	store  RuleStore
	log    DeliveryLog
	logger *slog.Logger
	now    func() time.Time
}

// NewRules returns the RulesService over a store and a delivery log.
func NewRules(store RuleStore, log DeliveryLog, logger *slog.Logger) *Rules {
	return &Rules{store: store, log: log, logger: logger, now: time.Now}
}

// rulesStatus maps the rules' own errors, then the common ones.
func (s *Rules) status(method string, err error) error {
	var fe *rule.FieldError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &fe):
		return invalidStatus(&InvalidError{Violations: []event.Violation{{Field: fe.Field, Description: fe.Description}}})
	case errors.Is(err, rule.ErrNotFound):
		return status.Error(codes.NotFound, "rule not found")
	case errors.Is(err, rule.ErrExists):
		return status.Error(codes.AlreadyExists, err.Error())
	case errors.Is(err, rule.ErrConflict):
		return status.Error(codes.Aborted, "the rule changed since the given revision: read it again")
	case errors.Is(err, delivery.ErrNoNotification):
		return status.Error(codes.NotFound, "no such notification for this rule (or it is past the retention)")
	}
	return toStatus(s.logger, method, err)
}

// authorize checks that the caller may manage the tenant's rules and watch
// its events, and returns the kinds it may watch there (nil: all).
func authorize(ctx context.Context, pt *eventgatev1.Tenant) (rule.Tenant, []rule.GroupKind, error) {
	if pt == nil || pt.GetType() == "" {
		return rule.Tenant{}, nil, invalid("tenant", "is required")
	}
	t := &eventgatev1.Tenant{Type: pt.GetType(), Name: pt.GetName()}
	if vs := event.ValidateTenant(t); len(vs) > 0 {
		return rule.Tenant{}, nil, tenantInvalid(vs)
	}
	p, err := principal(ctx)
	if err != nil {
		return rule.Tenant{}, nil, err
	}
	at := &authz.Tenant{Type: t.Type, Name: t.Name}
	if _, err := p.Scope(authz.VerbRules, at); err != nil {
		return rule.Tenant{}, nil, err
	}
	sc, err := p.Scope(authz.VerbWatch, at)
	if err != nil {
		return rule.Tenant{}, nil, err
	}
	var kinds []rule.GroupKind
	if len(sc.Tenants) == 1 {
		for _, k := range sc.Tenants[0].Kinds {
			kinds = append(kinds, rule.GroupKind{Group: k.Group, Kind: k.Kind})
		}
	}
	return rule.Tenant{Type: t.Type, Name: t.Name}, kinds, nil
}

// CreateRule implements RulesService.CreateRule.
func (s *Rules) CreateRule(ctx context.Context, req *eventgatev1.CreateRuleRequest) (*eventgatev1.CreateRuleResponse, error) {
	if req.GetRule() == nil {
		return nil, s.status("CreateRule", invalid("rule", "is required"))
	}
	t, kinds, err := authorize(ctx, req.GetRule().GetTenant())
	if err != nil {
		return nil, s.status("CreateRule", err)
	}
	r, err := ruleFromProto(req.GetRule(), nil)
	if err != nil {
		return nil, s.status("CreateRule", err)
	}
	r.Tenant, r.Kinds = t, kinds
	r.UID = newUID()
	r.Created = s.now().UTC()
	r.Updated = r.Created
	out, err := s.store.Create(ctx, r)
	if err != nil {
		return nil, s.status("CreateRule", err)
	}
	return &eventgatev1.CreateRuleResponse{Rule: ruleToProto(out)}, nil
}

// GetRule implements RulesService.GetRule.
func (s *Rules) GetRule(ctx context.Context, req *eventgatev1.GetRuleRequest) (*eventgatev1.GetRuleResponse, error) {
	r, err := s.get(ctx, req.GetTenant(), "name", req.GetName())
	if err != nil {
		return nil, s.status("GetRule", err)
	}
	return &eventgatev1.GetRuleResponse{Rule: ruleToProto(r)}, nil
}

func (s *Rules) get(ctx context.Context, pt *eventgatev1.Tenant, field, name string) (*rule.Rule, error) {
	t, _, err := authorize(ctx, pt)
	if err != nil {
		return nil, err
	}
	if err := rule.ValidateName(field, name); err != nil {
		return nil, err
	}
	return s.store.Get(ctx, t, name)
}

// ListRules implements RulesService.ListRules.
func (s *Rules) ListRules(ctx context.Context, req *eventgatev1.ListRulesRequest) (*eventgatev1.ListRulesResponse, error) {
	t, _, err := authorize(ctx, req.GetTenant())
	if err != nil {
		return nil, s.status("ListRules", err)
	}
	rs, err := s.store.List(ctx, t)
	if err != nil {
		return nil, s.status("ListRules", err)
	}
	out := &eventgatev1.ListRulesResponse{}
	for _, r := range rs {
		out.Rules = append(out.Rules, ruleToProto(r))
	}
	return out, nil
}

// UpdateRule implements RulesService.UpdateRule.
func (s *Rules) UpdateRule(ctx context.Context, req *eventgatev1.UpdateRuleRequest) (*eventgatev1.UpdateRuleResponse, error) {
	if req.GetRule() == nil {
		return nil, s.status("UpdateRule", invalid("rule", "is required"))
	}
	old, err := s.get(ctx, req.GetRule().GetTenant(), "rule.name", req.GetRule().GetName())
	if err != nil {
		return nil, s.status("UpdateRule", err)
	}
	_, kinds, _ := authorize(ctx, req.GetRule().GetTenant())
	if rev := req.GetRevision(); rev != 0 && rev != old.Revision {
		return nil, s.status("UpdateRule", fmt.Errorf("%w: %s", rule.ErrConflict, old.Name))
	}
	r, err := ruleFromProto(req.GetRule(), old)
	if err != nil {
		return nil, s.status("UpdateRule", err)
	}
	r.Tenant, r.Kinds, r.UID, r.Created, r.Updated = old.Tenant, kinds, old.UID, old.Created, s.now().UTC()
	if r.Paused && old.Paused {
		r.PausedReason = old.PausedReason
	}
	out, err := s.store.Update(ctx, r, old.Revision)
	if err != nil {
		return nil, s.status("UpdateRule", err)
	}
	return &eventgatev1.UpdateRuleResponse{Rule: ruleToProto(out)}, nil
}

// DeleteRule implements RulesService.DeleteRule.
func (s *Rules) DeleteRule(ctx context.Context, req *eventgatev1.DeleteRuleRequest) (*eventgatev1.DeleteRuleResponse, error) {
	t, _, err := authorize(ctx, req.GetTenant())
	if err != nil {
		return nil, s.status("DeleteRule", err)
	}
	if err := rule.ValidateName("name", req.GetName()); err != nil {
		return nil, s.status("DeleteRule", err)
	}
	if err := s.store.Delete(ctx, t, req.GetName()); err != nil {
		return nil, s.status("DeleteRule", err)
	}
	return &eventgatev1.DeleteRuleResponse{}, nil
}

// ListDeliveries implements RulesService.ListDeliveries.
func (s *Rules) ListDeliveries(ctx context.Context, req *eventgatev1.ListDeliveriesRequest) (*eventgatev1.ListDeliveriesResponse, error) {
	ps := int(req.GetPageSize())
	if ps < 0 || ps > 1000 {
		return nil, s.status("ListDeliveries", invalid("pageSize", "must be between 1 and 1000"))
	}
	if ps == 0 {
		ps = 100
	}
	r, err := s.get(ctx, req.GetTenant(), "rule", req.GetRule())
	if err != nil {
		return nil, s.status("ListDeliveries", err)
	}
	ds, err := s.log.Deliveries(ctx, r.UID, ps)
	if err != nil {
		return nil, s.status("ListDeliveries", fmt.Errorf("%w: %w", ErrUnavailable, err))
	}
	out := &eventgatev1.ListDeliveriesResponse{}
	for _, d := range ds {
		pd := &eventgatev1.Delivery{NotificationId: d.NotificationID, State: d.State, EventUid: d.EventUID,
			Status: deliveryStatus(d.Status), CreateTime: timestamppb.New(d.Created)}
		for _, a := range d.Attempts {
			pd.Attempts = append(pd.Attempts, &eventgatev1.DeliveryAttempt{Time: timestamppb.New(a.Time),
				Latency: durationpb.New(a.Latency), StatusCode: int32(a.Code), Error: a.Error})
		}
		out.Deliveries = append(out.Deliveries, pd)
	}
	return out, nil
}

func deliveryStatus(s string) eventgatev1.DeliveryStatus {
	switch s {
	case delivery.StatusDelivered:
		return eventgatev1.DeliveryStatus_DELIVERY_STATUS_DELIVERED
	case delivery.StatusRetrying:
		return eventgatev1.DeliveryStatus_DELIVERY_STATUS_RETRYING
	case delivery.StatusDead:
		return eventgatev1.DeliveryStatus_DELIVERY_STATUS_DEAD
	}
	return eventgatev1.DeliveryStatus_DELIVERY_STATUS_UNSPECIFIED
}

// Redeliver implements RulesService.Redeliver.
func (s *Rules) Redeliver(ctx context.Context, req *eventgatev1.RedeliverRequest) (*eventgatev1.RedeliverResponse, error) {
	if req.GetNotificationId() == "" {
		return nil, s.status("Redeliver", invalid("notificationId", "is required"))
	}
	r, err := s.get(ctx, req.GetTenant(), "rule", req.GetRule())
	if err != nil {
		return nil, s.status("Redeliver", err)
	}
	if err := s.log.Redeliver(ctx, r.UID, req.GetNotificationId()); err != nil {
		return nil, s.status("Redeliver", err)
	}
	return &eventgatev1.RedeliverResponse{}, nil
}

func newUID() string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// ruleFromProto validates a rule from the API. old, on update, supplies
// the write-only secrets the request leaves out.
func ruleFromProto(p *eventgatev1.Rule, old *rule.Rule) (*rule.Rule, error) {
	r := &rule.Rule{
		Name: p.GetName(), Description: p.GetDescription(), FieldSelector: p.GetFieldSelector(),
		LabelSelector: p.GetLabelSelector(), Template: p.GetTemplate(), Paused: p.GetPaused(),
	}
	if len(r.Description) > 1024 {
		return nil, invalid("rule.description", "must be at most 1024 bytes")
	}
	if err := rule.ValidateName("rule.name", r.Name); err != nil {
		return nil, err
	}
	if err := parseFilter(&r.Filter, "rule.fieldSelector", r.FieldSelector, "rule.labelSelector", r.LabelSelector); err != nil {
		return nil, err
	}
	if err := conditionFromProto(r, p.GetCondition()); err != nil {
		return nil, err
	}
	if sp := p.GetSuppression(); sp != nil {
		r.SkipResolved = sp.GetSkipResolved()
		if ri := sp.GetRenotifyInterval(); ri != nil {
			if !ri.IsValid() {
				return nil, invalid("rule.suppression.renotifyInterval", "is not a valid duration")
			}
			r.Renotify = ri.AsDuration()
		}
	}
	if err := destinationFromProto(r, p.GetDestination(), old); err != nil {
		return nil, err
	}
	if _, err := rule.CompileTemplate(r.Template); err != nil {
		var fe *rule.FieldError
		if errors.As(err, &fe) {
			fe.Field = "rule.template"
		}
		return nil, err
	}
	if err := r.Validate(); err != nil {
		var fe *rule.FieldError
		if errors.As(err, &fe) && !strings.HasPrefix(fe.Field, "rule.") {
			fe.Field = "rule." + fe.Field
		}
		return nil, err
	}
	return r, nil
}

func parseFilter(f *query.Filter, fsField, fs, lsField, ls string) error {
	empty, err := applyFieldSelector(f, fs)
	if err != nil {
		var inv *InvalidError
		if errors.As(err, &inv) {
			for i := range inv.Violations {
				inv.Violations[i].Field = fsField
			}
		}
		return err
	}
	if empty {
		return invalid(fsField, "can match no event")
	}
	reqs, err := selector.Parse(ls)
	if err != nil {
		return invalid(lsField, "%v", err)
	}
	for _, r := range reqs {
		f.Labels = append(f.Labels, query.LabelReq{Key: r.Key, Op: r.Op, Values: r.Values})
	}
	if err := f.Validate(); err != nil {
		return invalid(fsField, "%v", err)
	}
	return nil
}

func duration(field string, d *durationpb.Duration) (time.Duration, error) {
	if d == nil {
		return 0, invalid(field, "is required")
	}
	if !d.IsValid() {
		return 0, invalid(field, "is not a valid duration")
	}
	return d.AsDuration(), nil
}

func conditionFromProto(r *rule.Rule, c *eventgatev1.Condition) error {
	var err error
	switch k := c.GetKind().(type) {
	case *eventgatev1.Condition_Every:
		r.Condition = rule.Condition{Kind: rule.KindEvery}
	case *eventgatev1.Condition_Count:
		cc := k.Count
		r.Condition = rule.Condition{Kind: rule.KindCount, Threshold: int(cc.GetThreshold()), GroupBy: cc.GetGroupBy()}
		if r.Condition.Window, err = duration("rule.condition.count.window", cc.GetWindow()); err != nil {
			return err
		}
		if sel := cc.GetResolveFieldSelector(); sel != "" {
			r.ResolveFieldSelector = sel
			r.Resolve = &query.Filter{}
			if err := parseFilter(r.Resolve, "rule.condition.count.resolveFieldSelector", sel, "", ""); err != nil {
				return err
			}
		}
	case *eventgatev1.Condition_Series:
		r.Condition = rule.Condition{Kind: rule.KindSeries, Threshold: int(k.Series.GetThreshold())}
	case *eventgatev1.Condition_Absence:
		r.Condition = rule.Condition{Kind: rule.KindAbsence, GroupBy: k.Absence.GetGroupBy()}
		if r.Condition.Window, err = duration("rule.condition.absence.window", k.Absence.GetWindow()); err != nil {
			return err
		}
	case *eventgatev1.Condition_Recovery:
		r.Condition = rule.Condition{Kind: rule.KindRecovery, GroupBy: k.Recovery.GetGroupBy()}
	default:
		return invalid("rule.condition", "one of every, count, series, absence or recovery is required")
	}
	return nil
}

func destinationFromProto(r *rule.Rule, d *eventgatev1.Destination, old *rule.Rule) error {
	var prev rule.Destination
	if old != nil {
		prev = old.Destination
	}
	// keep returns the stored value of a write-only field the request
	// left out, or sent back as the API showed it.
	keep := func(given, shown, stored string) string {
		if (given == "" || given == shown) && stored != "" {
			return stored
		}
		return given
	}
	switch k := d.GetKind().(type) {
	case *eventgatev1.Destination_Webhook:
		r.Destination = rule.Destination{Kind: rule.DestWebhook, URL: k.Webhook.GetUrl(), Secret: k.Webhook.GetSecret()}
		if prev.Kind == rule.DestWebhook {
			r.Destination.URL = keep(r.Destination.URL, withoutQuery(prev.URL), prev.URL)
			r.Destination.Secret = keep(r.Destination.Secret, "", prev.Secret)
		}
	case *eventgatev1.Destination_Slack:
		r.Destination = rule.Destination{Kind: rule.DestSlack, URL: k.Slack.GetUrl()}
		if prev.Kind == rule.DestSlack {
			r.Destination.URL = keep(r.Destination.URL, delivery.RedactedURL(prev.URL), prev.URL)
		}
	case *eventgatev1.Destination_Cloudevents:
		mode := "structured"
		switch k.Cloudevents.GetMode() {
		case eventgatev1.CloudEventsMode_CLOUD_EVENTS_MODE_BINARY:
			mode = "binary"
		case eventgatev1.CloudEventsMode_CLOUD_EVENTS_MODE_STRUCTURED, eventgatev1.CloudEventsMode_CLOUD_EVENTS_MODE_UNSPECIFIED:
		default:
			return invalid("rule.destination.cloudevents.mode", "unknown mode %d", k.Cloudevents.GetMode())
		}
		r.Destination = rule.Destination{Kind: rule.DestCloudEvents, URL: k.Cloudevents.GetUrl(), Mode: mode}
		if prev.Kind == rule.DestCloudEvents {
			r.Destination.URL = keep(r.Destination.URL, withoutQuery(prev.URL), prev.URL)
		}
	case *eventgatev1.Destination_Nats:
		r.Destination = rule.Destination{Kind: rule.DestNATS, Subject: k.Nats.GetSubject()}
	default:
		return invalid("rule.destination", "one of webhook, slack, cloudevents or nats is required")
	}
	return nil
}

// withoutQuery is what the API shows of a webhook or CloudEvents URL: its
// query string (where tokens go) and user info withheld.
func withoutQuery(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "…"
	}
	hidden := u.RawQuery != "" || u.User != nil
	u.RawQuery, u.User, u.Fragment = "", nil, ""
	if hidden {
		return u.String() + "?…"
	}
	return u.String()
}

func ruleToProto(r *rule.Rule) *eventgatev1.Rule {
	p := &eventgatev1.Rule{
		Name: r.Name, Tenant: &eventgatev1.Tenant{Type: r.Tenant.Type, Name: r.Tenant.Name}, Description: r.Description,
		FieldSelector: r.FieldSelector, LabelSelector: r.LabelSelector, Template: r.Template, Paused: r.Paused,
		Status: &eventgatev1.RuleStatus{CreateTime: timestamppb.New(r.Created), UpdateTime: timestamppb.New(r.Updated),
			PausedReason: r.PausedReason, Revision: r.Revision},
	}
	c := r.Condition
	switch c.Kind {
	case rule.KindEvery:
		p.Condition = &eventgatev1.Condition{Kind: &eventgatev1.Condition_Every{Every: &eventgatev1.EveryCondition{}}}
	case rule.KindCount:
		p.Condition = &eventgatev1.Condition{Kind: &eventgatev1.Condition_Count{Count: &eventgatev1.CountCondition{
			Threshold: int32(c.Threshold), Window: durationpb.New(c.Window), GroupBy: c.GroupBy, ResolveFieldSelector: r.ResolveFieldSelector}}}
	case rule.KindSeries:
		p.Condition = &eventgatev1.Condition{Kind: &eventgatev1.Condition_Series{Series: &eventgatev1.SeriesCondition{Threshold: int32(c.Threshold)}}}
	case rule.KindAbsence:
		p.Condition = &eventgatev1.Condition{Kind: &eventgatev1.Condition_Absence{Absence: &eventgatev1.AbsenceCondition{
			Window: durationpb.New(c.Window), GroupBy: c.GroupBy}}}
	case rule.KindRecovery:
		p.Condition = &eventgatev1.Condition{Kind: &eventgatev1.Condition_Recovery{Recovery: &eventgatev1.RecoveryCondition{GroupBy: c.GroupBy}}}
	}
	if r.Renotify > 0 || r.SkipResolved {
		p.Suppression = &eventgatev1.Suppression{SkipResolved: r.SkipResolved}
		if r.Renotify > 0 {
			p.Suppression.RenotifyInterval = durationpb.New(r.Renotify)
		}
	}
	d := r.Destination
	switch d.Kind {
	case rule.DestWebhook:
		p.Destination = &eventgatev1.Destination{Kind: &eventgatev1.Destination_Webhook{Webhook: &eventgatev1.WebhookDestination{
			Url: withoutQuery(d.URL), SecretSet: d.Secret != ""}}}
	case rule.DestSlack:
		p.Destination = &eventgatev1.Destination{Kind: &eventgatev1.Destination_Slack{Slack: &eventgatev1.SlackDestination{Url: delivery.RedactedURL(d.URL)}}}
	case rule.DestCloudEvents:
		mode := eventgatev1.CloudEventsMode_CLOUD_EVENTS_MODE_STRUCTURED
		if d.Mode == "binary" {
			mode = eventgatev1.CloudEventsMode_CLOUD_EVENTS_MODE_BINARY
		}
		p.Destination = &eventgatev1.Destination{Kind: &eventgatev1.Destination_Cloudevents{Cloudevents: &eventgatev1.CloudEventsDestination{
			Url: withoutQuery(d.URL), Mode: mode}}}
	case rule.DestNATS:
		p.Destination = &eventgatev1.Destination{Kind: &eventgatev1.Destination_Nats{Nats: &eventgatev1.NatsDestination{Subject: d.Subject}}}
	}
	return p
}
