package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/encoding/protojson"
	"sigs.k8s.io/yaml"

	"github.com/eventgate/eventgate/client"
)

// emitFlags are emit's flags.
type emitFlags struct {
	file, idemKey                  string
	ev                             client.Event
	regarding, related, apiVersion string
	relatedAPIVersion, fieldPath   string
	labels                         []string
}

func newEmit(g *globals) *cobra.Command {
	var fl emitFlags
	cmd := &cobra.Command{
		Use:   "emit [-f FILE | --reason R --regarding KIND/NAME ...]",
		Short: "Emit events from flags, or from a JSON or YAML file or stdin",
		Long: `Emit one event described by flags, or the events of a JSON or YAML file (-f FILE, or -f - for stdin).

A file holds one event, a list of events, or {"events": [...]}; fields are named as in the API
(reason, note, type, action, regarding: {kind, name, namespace, apiVersion}, reportingController, ...).
YAML files may hold several documents.`,
		Example: `  eventgate emit --reason Deployed --note "v1.2.3 rolled out" --regarding Deployment/api -n web
  eventgate emit -f events.yaml
  kubectl get events -o json | jq '.items' | eventgate emit -f -`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var evs []*client.Event
			if fl.file != "" {
				var err error
				if evs, err = readEvents(fl.file, cmd.InOrStdin()); err != nil {
					return err
				}
			} else {
				e, err := fl.event()
				if err != nil {
					return err
				}
				evs = []*client.Event{e}
			}
			return g.emit(cmd.Context(), evs, fl.idemKey)
		},
	}
	f := cmd.Flags()
	f.StringVarP(&fl.file, "filename", "f", "", "JSON or YAML file of events; - reads stdin")
	f.StringVar(&fl.idemKey, "idempotency-key", "", "key that makes a retried emit store nothing twice")
	f.StringVar(&fl.ev.Reason, "reason", "", "why the action was taken, UpperCamelCase")
	f.StringVar(&fl.ev.Note, "note", "", "human-readable description")
	f.StringVar(&fl.ev.Type, "type", "Normal", "Normal or Warning")
	f.StringVar(&fl.ev.Action, "action", "", "what was done or failed")
	f.StringVar(&fl.ev.Name, "name", "", "name of the event (default: generated)")
	f.StringVar(&fl.ev.ReportingController, "reporting-controller", "eventgate-cli", "name of the emitter")
	f.StringVar(&fl.ev.ReportingInstance, "reporting-instance", "", "instance of the emitter (default: the host name)")
	f.StringVar(&fl.regarding, "regarding", "", "the object the event is about, KIND/NAME")
	f.StringVar(&fl.apiVersion, "api-version", "v1", "API version of the regarding object")
	f.StringVar(&fl.fieldPath, "field-path", "", "field of the regarding object")
	f.StringVar(&fl.related, "related", "", "a second object, KIND/NAME")
	f.StringVar(&fl.relatedAPIVersion, "related-api-version", "v1", "API version of the related object")
	f.StringArrayVarP(&fl.labels, "label", "l", nil, "label key=value (repeatable)")
	_ = cmd.MarkFlagFilename("filename", "json", "yaml", "yml")
	cmd.PreRun = func(*cobra.Command, []string) {
		if fl.ev.ReportingInstance == "" {
			fl.ev.ReportingInstance, _ = os.Hostname()
		}
	}
	return cmd
}

// event is the event the flags describe.
func (fl *emitFlags) event() (*client.Event, error) {
	if fl.ev.Reason == "" || fl.regarding == "" {
		return nil, fmt.Errorf("emit needs -f FILE, or at least --reason and --regarding KIND/NAME")
	}
	e := &fl.ev
	ref, err := objectRef(fl.regarding, fl.apiVersion)
	if err != nil {
		return nil, fmt.Errorf("--regarding: %w", err)
	}
	ref.FieldPath = fl.fieldPath
	e.Regarding = ref
	if fl.related != "" {
		if e.Related, err = objectRef(fl.related, fl.relatedAPIVersion); err != nil {
			return nil, fmt.Errorf("--related: %w", err)
		}
	}
	for _, l := range fl.labels {
		k, v, ok := strings.Cut(l, "=")
		if !ok {
			return nil, fmt.Errorf("--label %q: want key=value", l)
		}
		if e.Labels == nil {
			e.Labels = map[string]string{}
		}
		e.Labels[k] = v
	}
	return e, nil
}

// emit emits evs (in the context's namespace when they name none) and
// prints each one's outcome.
func (g *globals) emit(ctx context.Context, evs []*client.Event, idemKey string) error {
	c, conn, tenant, err := g.dialTenant()
	if err != nil {
		return err
	}
	defer c.Close()
	for _, e := range evs {
		if e.Namespace == "" && e.GetRegarding().GetNamespace() == "" {
			e.Namespace = conn.Namespace
			if e.Regarding != nil && conn.Namespace != "" {
				e.Regarding.Namespace = conn.Namespace
			}
		}
	}
	resp, err := c.Emit(ctx, &client.EmitRequest{Events: evs, Tenant: tenant, IdempotencyKey: idemKey})
	if err != nil {
		return asConnError(conn.Server, err)
	}
	for i, r := range resp.GetResults() {
		name := r.GetName()
		if name == "" {
			name = evs[i].GetName()
		}
		if name == "" {
			name = r.GetUid()
		}
		fmt.Fprintf(g.stdout, "event/%s %s\n", name, outcomeWord(r))
	}
	return nil
}

func outcomeWord(r *client.EmitResult) string {
	switch r.GetOutcome().String() {
	case "EMIT_OUTCOME_DUPLICATE":
		return "unchanged"
	case "EMIT_OUTCOME_SERIES_STARTED", "EMIT_OUTCOME_SERIES_COUNTED":
		return "counted into series " + r.GetSeriesUid()
	}
	return "created"
}

// objectRef parses KIND/NAME (NAMESPACE/KIND/NAME is not taken: the
// namespace is -n).
func objectRef(s, apiVersion string) (*client.ObjectReference, error) {
	kind, name, ok := strings.Cut(s, "/")
	if !ok || kind == "" || name == "" || strings.Contains(name, "/") {
		return nil, fmt.Errorf("%q: want KIND/NAME, e.g. Deployment/api", s)
	}
	return &client.ObjectReference{ApiVersion: apiVersion, Kind: kind, Name: name}, nil
}

// readEvents reads one event, a list, or {"events": [...]} from a JSON or
// YAML file (several YAML documents too).
func readEvents(file string, stdin io.Reader) ([]*client.Event, error) {
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
	var evs []*client.Event
	for i, doc := range yamlDocuments(b) {
		j, err := yaml.YAMLToJSON(doc)
		if err != nil {
			return nil, fmt.Errorf("%s: document %d: %w", file, i+1, err)
		}
		j = bytes.TrimSpace(j)
		if len(j) == 0 || string(j) == "null" {
			continue
		}
		var items []json.RawMessage
		switch {
		case j[0] == '[':
			if err := json.Unmarshal(j, &items); err != nil {
				return nil, fmt.Errorf("%s: %w", file, err)
			}
		default:
			var wrapper struct {
				Events []json.RawMessage `json:"events"`
			}
			if err := json.Unmarshal(j, &wrapper); err == nil && wrapper.Events != nil {
				items = wrapper.Events
			} else {
				items = []json.RawMessage{j}
			}
		}
		for k, item := range items {
			ev := &client.Event{}
			if err := protojson.Unmarshal(item, ev); err != nil {
				return nil, fmt.Errorf("%s: event %d: %w", file, len(evs)+k+1, err)
			}
			evs = append(evs, ev)
		}
	}
	if len(evs) == 0 {
		return nil, fmt.Errorf("%s: no events", file)
	}
	return evs, nil
}

// yamlDocuments splits a YAML stream at its "---" lines.
func yamlDocuments(b []byte) [][]byte {
	var docs [][]byte
	var cur []string
	for _, line := range strings.Split(string(b), "\n") {
		if strings.TrimRight(line, " \t\r") == "---" {
			docs = append(docs, []byte(strings.Join(cur, "\n")))
			cur = nil
			continue
		}
		cur = append(cur, line)
	}
	return append(docs, []byte(strings.Join(cur, "\n")))
}
