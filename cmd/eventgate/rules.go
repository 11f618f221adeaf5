package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"sigs.k8s.io/yaml"

	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
)

// rulesCall dials and resolves the tenant every rules command needs.
func (g *globals) rulesCall(ctx context.Context, fn func(ctx context.Context, rc eventgatev1.RulesServiceClient, t *eventgatev1.Tenant) error) error {
	c, conn, t, err := g.dialTenant()
	if err != nil {
		return err
	}
	defer c.Close()
	if t == nil {
		return errors.New("rules belong to a tenant: pass --tenant type/name (or set EVENTGATE_TENANT)")
	}
	if err := fn(ctx, c.Rules(), t); err != nil {
		return asConnError(conn.Server, err)
	}
	return nil
}

func newRules(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "rules",
		Short: "Manage the tenant's rules and see their deliveries",
		Long: `Rules notify a webhook, Slack, a CloudEvents sink or a NATS subject when a condition holds over
the tenant's events. See the README's "Rules" section for the fields.`,
	}
	cmd.AddCommand(newRulesList(g), newRulesGet(g), newRulesApply(g), newRulesDelete(g), newRulesDeliveries(g), newRulesRedeliver(g))
	return cmd
}

// newRulesList is `rules list`: it lists the tenant's rules.
func newRulesList(g *globals) *cobra.Command {
	var output string
	list := &cobra.Command{
		Use:   "list",
		Short: "List the tenant's rules",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return g.rulesCall(cmd.Context(), func(ctx context.Context, rc eventgatev1.RulesServiceClient, t *eventgatev1.Tenant) error {
				resp, err := rc.ListRules(ctx, &eventgatev1.ListRulesRequest{Tenant: t})
				if err != nil {
					return err
				}
				if output != "" {
					p, err := newPrinter(g.stdout, output, false)
					if err != nil {
						return err
					}
					return p.object(resp)
				}
				p, _ := newPrinter(g.stdout, "", false)
				fmt.Fprintf(p.tw, "NAME\tCONDITION\tDESTINATION\tPAUSED\n")
				for _, r := range resp.GetRules() {
					fmt.Fprintf(p.tw, "%s\t%s\t%s\t%v\n", r.GetName(), conditionText(r.GetCondition()), destinationText(r.GetDestination()), r.GetPaused())
				}
				return p.tw.Flush()
			})
		},
	}
	list.Flags().StringVarP(&output, "output", "o", "", "json or yaml (default: a table)")
	return list
}

// newRulesGet is `rules get`: it shows one rule.
func newRulesGet(g *globals) *cobra.Command {
	var getOutput string
	get := &cobra.Command{
		Use:   "get NAME",
		Short: "Show one rule (secrets are never shown)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.rulesCall(cmd.Context(), func(ctx context.Context, rc eventgatev1.RulesServiceClient, t *eventgatev1.Tenant) error {
				resp, err := rc.GetRule(ctx, &eventgatev1.GetRuleRequest{Tenant: t, Name: args[0]})
				if err != nil {
					return err
				}
				p, err := newPrinter(g.stdout, getOutput, false)
				if err != nil {
					return err
				}
				return p.object(resp.GetRule())
			})
		},
	}
	get.Flags().StringVarP(&getOutput, "output", "o", "yaml", "json or yaml")
	return get
}

// newRulesApply is `rules apply`: it creates or replaces a rule from a file.
func newRulesApply(g *globals) *cobra.Command {
	var file string
	apply := &cobra.Command{
		Use:   "apply -f FILE",
		Short: "Create a rule, or replace the one of the same name, from a YAML or JSON file ('-': stdin)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			r, err := readRule(cmd.InOrStdin(), file)
			if err != nil {
				return err
			}
			return g.rulesCall(cmd.Context(), func(ctx context.Context, rc eventgatev1.RulesServiceClient, t *eventgatev1.Tenant) error {
				if r.Tenant == nil {
					r.Tenant = t
				}
				_, err := rc.CreateRule(ctx, &eventgatev1.CreateRuleRequest{Rule: r})
				verb := "created"
				if status.Code(err) == codes.AlreadyExists {
					_, err = rc.UpdateRule(ctx, &eventgatev1.UpdateRuleRequest{Rule: r})
					verb = "configured"
				}
				if err != nil {
					return err
				}
				fmt.Fprintf(g.stdout, "rule/%s %s\n", r.GetName(), verb)
				return nil
			})
		},
	}
	apply.Flags().StringVarP(&file, "filename", "f", "", "the rule, YAML or JSON ('-': stdin)")
	_ = apply.MarkFlagRequired("filename")
	return apply
}

// newRulesDelete is `rules delete`: it deletes a rule.
func newRulesDelete(g *globals) *cobra.Command {
	del := &cobra.Command{
		Use:   "delete NAME",
		Short: "Delete a rule",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.rulesCall(cmd.Context(), func(ctx context.Context, rc eventgatev1.RulesServiceClient, t *eventgatev1.Tenant) error {
				if _, err := rc.DeleteRule(ctx, &eventgatev1.DeleteRuleRequest{Tenant: t, Name: args[0]}); err != nil {
					return err
				}
				fmt.Fprintf(g.stdout, "rule/%s deleted\n", args[0])
				return nil
			})
		},
	}
	return del
}

// newRulesDeliveries is `rules deliveries`: it lists a rule's notifications and their deliveries.
func newRulesDeliveries(g *globals) *cobra.Command {
	var dOutput string
	var limit int32
	deliveries := &cobra.Command{
		Use:   "deliveries NAME",
		Short: "A rule's notifications, newest first, and how their delivery went",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.rulesCall(cmd.Context(), func(ctx context.Context, rc eventgatev1.RulesServiceClient, t *eventgatev1.Tenant) error {
				resp, err := rc.ListDeliveries(ctx, &eventgatev1.ListDeliveriesRequest{Tenant: t, Rule: args[0], PageSize: limit})
				if err != nil {
					return err
				}
				if dOutput != "" {
					p, err := newPrinter(g.stdout, dOutput, false)
					if err != nil {
						return err
					}
					return p.object(resp)
				}
				p, _ := newPrinter(g.stdout, "", false)
				fmt.Fprintf(p.tw, "NOTIFICATION\tSTATE\tSTATUS\tATTEMPTS\tLAST ERROR\n")
				for _, d := range resp.GetDeliveries() {
					last := ""
					if as := d.GetAttempts(); len(as) > 0 {
						last = as[len(as)-1].GetError()
					}
					fmt.Fprintf(p.tw, "%s\t%s\t%s\t%d\t%s\n", d.GetNotificationId(), d.GetState(),
						strings.ToLower(strings.TrimPrefix(d.GetStatus().String(), "DELIVERY_STATUS_")), len(d.GetAttempts()), last)
				}
				return p.tw.Flush()
			})
		},
	}
	deliveries.Flags().StringVarP(&dOutput, "output", "o", "", "json or yaml (default: a table)")
	deliveries.Flags().Int32Var(&limit, "limit", 100, "notifications to show")
	return deliveries
}

// newRulesRedeliver is `rules redeliver`: it queues a notification again.
func newRulesRedeliver(g *globals) *cobra.Command {
	redeliver := &cobra.Command{
		Use:   "redeliver NAME NOTIFICATION_ID",
		Short: "Queue a notification for delivery again",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.rulesCall(cmd.Context(), func(ctx context.Context, rc eventgatev1.RulesServiceClient, t *eventgatev1.Tenant) error {
				if _, err := rc.Redeliver(ctx, &eventgatev1.RedeliverRequest{Tenant: t, Rule: args[0], NotificationId: args[1]}); err != nil {
					return err
				}
				fmt.Fprintf(g.stdout, "notification %s queued\n", args[1])
				return nil
			})
		},
	}
	return redeliver
}

func readRule(stdin io.Reader, file string) (*eventgatev1.Rule, error) {
	var b []byte
	var err error
	if file == "-" {
		b, err = io.ReadAll(stdin)
	} else {
		b, err = os.ReadFile(file)
	}
	if err != nil {
		return nil, err
	}
	j, err := yaml.YAMLToJSON(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	r := &eventgatev1.Rule{}
	if err := protojson.Unmarshal(j, r); err != nil {
		return nil, fmt.Errorf("%s: not a rule: %w", file, err)
	}
	return r, nil
}

func conditionText(c *eventgatev1.Condition) string {
	switch k := c.GetKind().(type) {
	case *eventgatev1.Condition_Every:
		return "every"
	case *eventgatev1.Condition_Count:
		return fmt.Sprintf("count>=%d/%s", k.Count.GetThreshold(), k.Count.GetWindow().AsDuration())
	case *eventgatev1.Condition_Series:
		return fmt.Sprintf("series>=%d", k.Series.GetThreshold())
	case *eventgatev1.Condition_Absence:
		return fmt.Sprintf("absence/%s", k.Absence.GetWindow().AsDuration())
	case *eventgatev1.Condition_Recovery:
		return "recovery"
	}
	return ""
}

func destinationText(d *eventgatev1.Destination) string {
	switch k := d.GetKind().(type) {
	case *eventgatev1.Destination_Webhook:
		return "webhook " + k.Webhook.GetUrl()
	case *eventgatev1.Destination_Slack:
		return "slack " + k.Slack.GetUrl()
	case *eventgatev1.Destination_Cloudevents:
		return "cloudevents " + k.Cloudevents.GetUrl()
	case *eventgatev1.Destination_Nats:
		return "nats " + k.Nats.GetSubject()
	}
	return ""
}
