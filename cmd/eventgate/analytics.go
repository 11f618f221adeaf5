package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/eventgate/eventgate/client"
)

func newTop(g *globals) *cobra.Command {
	var (
		f         filters
		dimension string
		limit     int
		output    string
	)
	cmd := &cobra.Command{
		Use:   "top [DIMENSION]",
		Short: "The most frequent values of a dimension (reason, type, action, regarding.kind, namespace, reportingController, tenant)",
		Example: `  eventgate top reason -n web --since 1h
  eventgate top regarding.kind --type Warning`,
		Args:      cobra.MaximumNArgs(1),
		ValidArgs: []string{"reason", "type", "action", "regarding.kind", "namespace", "reportingController", "tenant"},
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 1 {
				dimension = args[0]
			}
			c, conn, tenant, err := g.dialTenant()
			if err != nil {
				return err
			}
			defer c.Close()
			q := f.query(conn, tenant)
			req := &client.TopRequest{
				Tenant: q.Tenant, Namespace: q.Namespace, Type: q.Type, Reason: q.Reason, ReportingController: q.ReportingController,
				Regarding: q.Regarding, Since: q.Since, FieldSelector: q.FieldSelector, LabelSelector: q.LabelSelector,
				Dimension: dimension, Limit: int32(limit),
			}
			resp, err := c.Top(cmd.Context(), req)
			if err != nil {
				return asConnError(conn.Server, err)
			}
			if output != "" {
				p, err := newPrinter(g.stdout, output, false)
				if err != nil {
					return err
				}
				return p.object(resp)
			}
			p, _ := newPrinter(g.stdout, "", false)
			fmt.Fprintf(p.tw, "%s\tCOUNT\tSHARE\tPREVIOUS\n", strings.ToUpper(resp.GetDimension()))
			for _, e := range resp.GetEntries() {
				fmt.Fprintf(p.tw, "%s\t%d\t%.1f%%\t%d\n", e.GetValue(), e.GetCount(), 100*e.GetShare(), e.GetPreviousCount())
			}
			if resp.GetOther() > 0 {
				fmt.Fprintf(p.tw, "(other)\t%d\t\t\n", resp.GetOther())
			}
			fmt.Fprintf(p.tw, "(total)\t%d\t\t%d\n", resp.GetTotal(), resp.GetPreviousTotal())
			return p.tw.Flush()
		},
	}
	f.add(cmd, true)
	cmd.Flags().StringVar(&dimension, "dimension", "reason", "the dimension to count")
	cmd.Flags().IntVar(&limit, "limit", 10, "values to show")
	cmd.Flags().StringVarP(&output, "output", "o", "", "json or yaml (default: a table)")
	return cmd
}

func newHistogram(g *globals) *cobra.Command {
	var (
		f      filters
		bucket time.Duration
		width  int
		output string
	)
	cmd := &cobra.Command{
		Use:   "histogram",
		Short: "Events per time bucket, as a bar chart in the terminal",
		Example: `  eventgate histogram -n web --since 6h --bucket 15m
  eventgate histogram --type Warning -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, conn, tenant, err := g.dialTenant()
			if err != nil {
				return err
			}
			defer c.Close()
			q := f.query(conn, tenant)
			req := &client.HistogramRequest{
				Tenant: q.Tenant, Namespace: q.Namespace, Type: q.Type, Reason: q.Reason, ReportingController: q.ReportingController,
				Regarding: q.Regarding, Since: q.Since, FieldSelector: q.FieldSelector, LabelSelector: q.LabelSelector,
			}
			if bucket > 0 {
				req.Bucket = durationpb.New(bucket)
			}
			resp, err := c.Histogram(cmd.Context(), req)
			if err != nil {
				return asConnError(conn.Server, err)
			}
			if output != "" {
				p, err := newPrinter(g.stdout, output, false)
				if err != nil {
					return err
				}
				return p.object(resp)
			}
			fmt.Fprint(g.stdout, barChart(resp.GetBucketStarts(), resp.GetTotals(), resp.GetBucket().AsDuration(), width))
			fmt.Fprintf(g.stdout, "total %d events, buckets of %s\n", resp.GetTotal(), resp.GetBucket().AsDuration())
			return nil
		},
	}
	f.add(cmd, true)
	cmd.Flags().DurationVar(&bucket, "bucket", 0, "bucket width, e.g. 1m, 1h (default: the server's choice)")
	cmd.Flags().IntVar(&width, "width", 50, "width of the longest bar")
	cmd.Flags().StringVarP(&output, "output", "o", "", "json or yaml (default: a bar chart)")
	return cmd
}

// barChart draws one line per bucket: its start, a bar scaled to the
// largest bucket, and the count.
func barChart(starts []*timestamppb.Timestamp, counts []int64, bucket time.Duration, width int) string {
	var peak int64
	for _, n := range counts {
		peak = max(peak, n)
	}
	layout := "2006-01-02 15:04"
	if bucket < time.Minute {
		layout = "2006-01-02 15:04:05"
	}
	var b strings.Builder
	for i, ts := range starts {
		var n int64
		if i < len(counts) {
			n = counts[i]
		}
		bar := 0
		if peak > 0 {
			bar = int((n*int64(width) + peak - 1) / peak)
		}
		fmt.Fprintf(&b, "%s │%s %d\n", ts.AsTime().Local().Format(layout), strings.Repeat("█", bar), n)
	}
	return b.String()
}
