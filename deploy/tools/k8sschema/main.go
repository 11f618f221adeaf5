// Command k8sschema writes strict JSON schemas of the Kubernetes kinds the
// eventgate chart renders, derived from the k8s.io/api Go types, in the
// layout kubeconform reads (-schema-location DIR/{{ .ResourceKind }}{{ .KindSuffix }}.json).
// It lets `make deploy-check` validate the chart with no network: every
// field must exist in the API and carry the right type.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// kinds are the kinds the chart and the NATS chart render.
var kinds = []struct {
	group, version, kind string
	obj                  any
}{
	{"apps", "v1", "StatefulSet", appsv1.StatefulSet{}},
	{"apps", "v1", "Deployment", appsv1.Deployment{}},
	{"", "v1", "Service", corev1.Service{}},
	{"", "v1", "Secret", corev1.Secret{}},
	{"", "v1", "ConfigMap", corev1.ConfigMap{}},
	{"", "v1", "ServiceAccount", corev1.ServiceAccount{}},
	{"", "v1", "PersistentVolumeClaim", corev1.PersistentVolumeClaim{}},
	{"policy", "v1", "PodDisruptionBudget", policyv1.PodDisruptionBudget{}},
	{"rbac.authorization.k8s.io", "v1", "Role", rbacv1.Role{}},
	{"rbac.authorization.k8s.io", "v1", "RoleBinding", rbacv1.RoleBinding{}},
}

func main() {
	out := flag.String("out", "", "directory to write the schemas to")
	flag.Parse()
	if *out == "" {
		fmt.Fprintln(os.Stderr, "k8sschema: -out DIR is required")
		os.Exit(2)
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, "k8sschema:", err)
		os.Exit(1)
	}
	for _, k := range kinds {
		s := schemaOf(reflect.TypeOf(k.obj), map[reflect.Type]bool{})
		apiVersion := k.version
		suffix := "-" + k.version
		if k.group != "" {
			apiVersion = k.group + "/" + k.version
			suffix = "-" + strings.Split(k.group, ".")[0] + "-" + k.version
		}
		props := s["properties"].(map[string]any)
		props["apiVersion"] = map[string]any{"type": "string", "enum": []string{apiVersion}}
		props["kind"] = map[string]any{"type": "string", "enum": []string{k.kind}}
		s["required"] = []string{"apiVersion", "kind", "metadata"}
		s["$schema"] = "http://json-schema.org/draft-07/schema#"
		b, err := json.MarshalIndent(s, "", " ")
		if err != nil {
			fmt.Fprintln(os.Stderr, "k8sschema:", err)
			os.Exit(1)
		}
		name := filepath.Join(*out, strings.ToLower(k.kind)+suffix+".json")
		if err := os.WriteFile(name, b, 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "k8sschema:", err)
			os.Exit(1)
		}
	}
}

var (
	quantity    = reflect.TypeOf(resource.Quantity{})
	intOrString = reflect.TypeOf(intstr.IntOrString{})
	timeT       = reflect.TypeOf(metav1.Time{})
	microTime   = reflect.TypeOf(metav1.MicroTime{})
	rawExt      = reflect.TypeOf(runtime.RawExtension{})
)

// schemaOf is the strict schema of t: objects admit only their fields.
// Types on a path already being described (recursive ones) admit anything.
func schemaOf(t reflect.Type, seen map[reflect.Type]bool) map[string]any {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t {
	case quantity:
		return map[string]any{"type": []string{"string", "number"}}
	case intOrString:
		return map[string]any{"type": []string{"string", "integer"}}
	case timeT, microTime:
		return map[string]any{"type": []string{"string", "null"}}
	case rawExt:
		return map[string]any{}
	}
	switch t.Kind() {
	case reflect.String:
		return map[string]any{"type": "string"}
	case reflect.Bool:
		return map[string]any{"type": "boolean"}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return map[string]any{"type": "integer"}
	case reflect.Float32, reflect.Float64:
		return map[string]any{"type": "number"}
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Uint8 { // []byte: base64
			return map[string]any{"type": []string{"string", "null"}}
		}
		return map[string]any{"type": []string{"array", "null"}, "items": schemaOf(t.Elem(), seen)}
	case reflect.Map:
		return map[string]any{"type": []string{"object", "null"}, "additionalProperties": schemaOf(t.Elem(), seen)}
	case reflect.Struct:
		if seen[t] {
			return map[string]any{}
		}
		seen[t] = true
		defer delete(seen, t)
		props := map[string]any{}
		addFields(t, props, seen)
		return map[string]any{"type": []string{"object", "null"}, "properties": props, "additionalProperties": false}
	case reflect.Interface:
		return map[string]any{}
	}
	return map[string]any{}
}

func addFields(t reflect.Type, props map[string]any, seen map[reflect.Type]bool) {
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		name, opts, _ := strings.Cut(tag, ",")
		if name == "-" || (!f.IsExported() && !f.Anonymous) {
			continue
		}
		if f.Anonymous && (name == "" || strings.Contains(opts, "inline")) {
			ft := f.Type
			for ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				addFields(ft, props, seen)
				continue
			}
		}
		if name == "" {
			name = f.Name
		}
		props[name] = schemaOf(f.Type, seen)
	}
}
