package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/eventgate/eventgate/client"
)

// filters are the selection flags of watch, query, top and histogram.
type filters struct {
	allNamespaces           bool
	types, reasons, ctrls   []string
	kind, name              string
	fieldSelector, labelSel string
	since                   time.Duration
}

func (f *filters) add(cmd *cobra.Command, selectors bool) {
	fl := cmd.Flags()
	fl.BoolVarP(&f.allNamespaces, "all-namespaces", "A", false, "events of every namespace")
	fl.StringSliceVar(&f.types, "type", nil, "only these types (Normal, Warning)")
	fl.StringSliceVar(&f.reasons, "reason", nil, "only these reasons")
	fl.StringSliceVar(&f.ctrls, "reporting-controller", nil, "only these reporting controllers")
	fl.StringVar(&f.kind, "kind", "", "only events regarding this kind")
	fl.StringVar(&f.name, "object", "", "only events regarding the object of this name")
	if selectors {
		fl.StringVar(&f.fieldSelector, "field-selector", "", `field selector, e.g. "type=Warning,reason in (A,B)"`)
		fl.StringVarP(&f.labelSel, "selector", "l", "", "label selector, e.g. app=web")
		fl.DurationVar(&f.since, "since", 0, "only events of the last duration, e.g. 1h")
	}
}

// namespace is the namespace to read: none with -A.
func (f *filters) namespace(conn connection) string {
	if f.allNamespaces {
		return ""
	}
	return conn.Namespace
}

func (f *filters) query(conn connection, tenant *client.Tenant) *client.QueryRequest {
	q := &client.QueryRequest{
		Tenant: tenant, Namespace: f.namespace(conn), Type: f.types, Reason: f.reasons, ReportingController: f.ctrls,
		FieldSelector: f.fieldSelector, LabelSelector: f.labelSel,
	}
	if f.kind != "" || f.name != "" {
		q.Regarding = &client.ObjectSelector{Kind: f.kind, Name: f.name}
	}
	if f.since > 0 {
		q.Since = timestamppb.New(time.Now().Add(-f.since))
	}
	return q
}

func newQuery(g *globals) *cobra.Command {
	var (
		f      filters
		output string
		limit  int
		newest bool
	)
	cmd := &cobra.Command{
		Use:     "query",
		Aliases: []string{"list", "ls"},
		Short:   "List stored events, as kubectl get events shows them",
		Example: `  eventgate query -n web
  eventgate query -A --type Warning --since 1h -o wide
  eventgate query --field-selector 'reason in (BackOff,Failed)' -o ndjson`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, conn, tenant, err := g.dialTenant()
			if err != nil {
				return err
			}
			defer c.Close()
			p, err := newPrinter(g.stdout, output, f.namespace(conn) == "")
			if err != nil {
				return err
			}
			q := f.query(conn, tenant)
			q.Order = client.OrderOldestFirst // as kubectl lists them
			if newest {
				q.Order = client.OrderNewestFirst
			}
			var evs []*client.Event
			for ev, err := range c.Query(cmd.Context(), q) {
				if err != nil {
					return asConnError(conn.Server, err)
				}
				evs = append(evs, ev)
				if limit > 0 && len(evs) >= limit {
					break
				}
			}
			if len(evs) == 0 && (output == "" || output == "wide" || output == "table") {
				if ns := f.namespace(conn); ns != "" {
					fmt.Fprintf(g.stderr, "No resources found in %s namespace.\n", ns)
				} else {
					fmt.Fprintln(g.stderr, "No resources found")
				}
				return nil
			}
			switch output {
			case "json", "yaml":
				return p.object(&client.QueryResponse{Events: evs})
			}
			return p.print(evs, time.Now())
		},
	}
	f.add(cmd, true)
	cmd.Flags().StringVarP(&output, "output", "o", "", "output format: wide, json, yaml, ndjson, name (default: a table)")
	cmd.Flags().IntVar(&limit, "limit", 0, "at most this many events")
	cmd.Flags().BoolVar(&newest, "newest-first", false, "newest events first")
	_ = cmd.RegisterFlagCompletionFunc("output", fixedCompletion("wide", "json", "yaml", "ndjson", "name"))
	_ = cmd.RegisterFlagCompletionFunc("type", fixedCompletion("Normal", "Warning"))
	return cmd
}

func newGet(g *globals) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "get NAME|UID",
		Short: "Show one stored event, by name (in -n's namespace) or uid",
		Example: `  eventgate get api.17a8e4c2 -n web -o yaml
  eventgate get 9b2f6c1e-2d0a-4f5e-8c3b-2f1d0e9a7b6c`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, conn, tenant, err := g.dialTenant()
			if err != nil {
				return err
			}
			defer c.Close()
			req := &client.GetRequest{Tenant: tenant}
			if conn.Namespace != "" {
				req.Namespace, req.Name = conn.Namespace, args[0]
			} else {
				req.Uid = args[0]
			}
			ev, err := c.Get(cmd.Context(), req)
			if status.Code(err) == codes.NotFound && req.Name != "" {
				// Not a name in the namespace: perhaps a uid.
				ev, err = c.Get(cmd.Context(), &client.GetRequest{Tenant: tenant, Uid: args[0]})
			}
			if err != nil {
				return asConnError(conn.Server, err)
			}
			p, err := newPrinter(g.stdout, output, false)
			if err != nil {
				return err
			}
			return p.print([]*client.Event{ev}, time.Now())
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "", "output format: wide, json, yaml, ndjson, name (default: a table)")
	_ = cmd.RegisterFlagCompletionFunc("output", fixedCompletion("wide", "json", "yaml", "ndjson", "name"))
	return cmd
}

func newWatch(g *globals) *cobra.Command {
	var (
		f         filters
		output    string
		rv        string
		bookmarks bool
	)
	cmd := &cobra.Command{
		Use:   "watch",
		Short: "Print events as they happen (tail -f), resuming across disconnects",
		Long: `Print events as they happen. A dropped connection or a restarted gateway is resumed from the last
event printed, with no gap and no duplicate. --resource-version starts after a known position (the
resourceVersion of a printed event, or of a query), so nothing in between is missed.`,
		Example: `  eventgate watch -n web
  eventgate watch -A --type Warning -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, conn, tenant, err := g.dialTenant()
			if err != nil {
				return err
			}
			defer c.Close()
			p, err := newPrinter(g.stdout, output, f.namespace(conn) == "")
			if err != nil {
				return err
			}
			req := &client.StreamWatchRequest{
				Tenant: tenant, Namespace: f.namespace(conn), Kind: f.kind, Name: f.name,
				Types: f.types, Reasons: f.reasons, ReportingControllers: f.ctrls, ResourceVersion: rv,
			}
			opts := client.WatchOptions{OnReconnect: func(err error) {
				fmt.Fprintf(g.stderr, "watch interrupted (%s): resuming\n", shortError(err))
			}}
			if bookmarks {
				opts.BookmarkInterval = 10 * time.Second
			}
			for we, err := range c.Watch(cmd.Context(), req, opts) {
				if err != nil {
					return asConnError(conn.Server, err)
				}
				if we.Type == client.Bookmark {
					if bookmarks && (output == "json" || output == "ndjson") {
						fmt.Fprintf(g.stdout, `{"type":"BOOKMARK","resourceVersion":%q}`+"\n", we.Event.GetResourceVersion())
					}
					continue
				}
				if err := p.print([]*client.Event{we.Event}, time.Now()); err != nil {
					return err
				}
			}
			if err := cmd.Context().Err(); err != nil {
				return nil // interrupted: the end of a tail -f
			}
			return nil
		},
	}
	f.add(cmd, false)
	cmd.Flags().StringVarP(&output, "output", "o", "", "output format: wide, json, yaml, ndjson, name (default: a table)")
	cmd.Flags().StringVar(&rv, "resource-version", "", "start after this resourceVersion (default: from now on)")
	cmd.Flags().BoolVar(&bookmarks, "bookmarks", false, "print the watch's bookmarks (json, ndjson)")
	_ = cmd.RegisterFlagCompletionFunc("output", fixedCompletion("wide", "json", "yaml", "ndjson", "name"))
	return cmd
}

func shortError(err error) string {
	s := err.Error()
	if i := strings.Index(s, "desc = "); i >= 0 {
		s = s[i+len("desc = "):]
	}
	return s
}

func fixedCompletion(values ...string) func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
	return func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		return values, cobra.ShellCompDirectiveNoFileComp
	}
}
