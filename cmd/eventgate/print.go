package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"sigs.k8s.io/yaml"

	"github.com/eventgate/eventgate/client"
	"github.com/eventgate/eventgate/internal/k8sapi/eventtable"
)

// printer writes events in one output format.
type printer struct {
	w             io.Writer
	format        string // "", "wide", "json", "yaml", "ndjson", "name"
	withNamespace bool
	tw            *tabwriter.Writer
	headerDone    bool
}

var formats = []string{"wide", "json", "yaml", "ndjson", "name"}

func newPrinter(w io.Writer, format string, withNamespace bool) (*printer, error) {
	switch format {
	case "", "table", "wide", "json", "yaml", "ndjson", "name":
	default:
		return nil, fmt.Errorf("unable to match a printer suitable for the output format %q, allowed formats are: %s", format, strings.Join(formats, ","))
	}
	if format == "table" {
		format = ""
	}
	// kubectl's table writer: the same widths and padding.
	return &printer{w: w, format: format, withNamespace: withNamespace, tw: tabwriter.NewWriter(w, 6, 4, 3, ' ', 0)}, nil
}

var compact = protojson.MarshalOptions{}

// print writes evs; a table gets its header once. list says whether the
// JSON and YAML forms are a list (query) or one object each (get, watch).
func (p *printer) print(evs []*client.Event, now time.Time) error {
	switch p.format {
	case "", "wide":
		return p.table(evs, now)
	case "name":
		for _, ev := range evs {
			fmt.Fprintf(p.w, "event/%s\n", ev.GetName())
		}
		return nil
	case "ndjson":
		for _, ev := range evs {
			b, err := compact.Marshal(ev)
			if err != nil {
				return err
			}
			// protojson varies its spacing on purpose; a line format
			// read by scripts is kept stable.
			var buf bytes.Buffer
			if err := json.Compact(&buf, b); err != nil {
				return err
			}
			fmt.Fprintf(p.w, "%s\n", buf.Bytes())
		}
		return nil
	}
	for _, ev := range evs {
		if err := p.object(ev); err != nil {
			return err
		}
	}
	return nil
}

// object writes one message as JSON or YAML (a YAML document each).
func (p *printer) object(m proto.Message) error {
	raw, err := compact.Marshal(m)
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	if err := json.Indent(&buf, raw, "", "    "); err != nil {
		return err
	}
	b := buf.Bytes()
	if p.format == "yaml" {
		if b, err = yaml.JSONToYAML(b); err != nil {
			return err
		}
		fmt.Fprintf(p.w, "---\n%s", b)
		return nil
	}
	fmt.Fprintf(p.w, "%s\n", b)
	return nil
}

// table prints as kubectl get events does: the server's Table of events
// (the same one the gateway's Kubernetes API answers kubectl with), the
// wide columns with -o wide, NAMESPACE first across namespaces.
func (p *printer) table(evs []*client.Event, now time.Time) error {
	t := eventtable.Table(evs, now)
	wide := p.format == "wide"
	visible := func(i int) bool { return wide || t.ColumnDefinitions[i].Priority == 0 }
	if !p.headerDone {
		var cols []string
		if p.withNamespace {
			cols = append(cols, "NAMESPACE")
		}
		for i, c := range t.ColumnDefinitions {
			if visible(i) {
				cols = append(cols, strings.ToUpper(c.Name))
			}
		}
		fmt.Fprintln(p.tw, strings.Join(cols, "\t"))
		p.headerDone = true
	}
	for r, row := range t.Rows {
		var cells []string
		if p.withNamespace {
			cells = append(cells, evs[r].GetNamespace())
		}
		for i, cell := range row.Cells {
			if i < len(t.ColumnDefinitions) && visible(i) {
				cells = append(cells, cellText(cell))
			}
		}
		fmt.Fprintln(p.tw, strings.Join(cells, "\t"))
	}
	return p.tw.Flush()
}

// cellText is kubectl's: a string up to its first line break (then
// "..."), anything else as fmt prints it.
func cellText(cell any) string {
	s, ok := cell.(string)
	if !ok {
		return fmt.Sprint(cell)
	}
	if i := strings.IndexAny(s, "\f\n\r"); i >= 0 {
		return s[:i] + "..."
	}
	return s
}
