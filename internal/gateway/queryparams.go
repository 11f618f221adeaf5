package gateway

import (
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"github.com/grpc-ecosystem/grpc-gateway/v2/utilities"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// strictQuery is the REST gateway's query parameter parser: a parameter
// must name a field of the request (its proto or JSON name, nested fields
// dotted, map entries as field[key]); grpc-gateway's own parser ignores any
// other, so a misspelled filter (the watch's "reason" for "reasons") matched
// every event. An error names the parameter as the caller spelled it.
type strictQuery struct{}

// queryMapKeyRE splits a map entry parameter, field[key].
var queryMapKeyRE = regexp.MustCompile(`^(.*)\[(.*)\]$`)

// Parse implements runtime.QueryParameterParser.
func (strictQuery) Parse(msg proto.Message, values url.Values, filter *utilities.DoubleArray) error {
	keys := make([]string, 0, len(values))
	for k := range values {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	seen := make(map[string]string, len(keys))
	for _, key := range keys {
		path, err := queryFieldPath(msg.ProtoReflect().Descriptor(), key)
		if err != nil {
			return &queryParamError{Param: key, Description: err.Error()}
		}
		if filter.HasCommonPrefix(strings.Split(strings.SplitN(path, "[", 2)[0], ".")) {
			continue // a path parameter: the path sets it
		}
		if other, ok := seen[path]; ok {
			return &queryParamError{Param: key, Description: fmt.Sprintf("sets the same field as %q", other)}
		}
		seen[path] = key
		if err := (&runtime.DefaultQueryParser{}).Parse(msg, url.Values{key: values[key]}, filter); err != nil {
			return &queryParamError{Param: key, Description: err.Error()}
		}
	}
	return nil
}

// queryFieldPath resolves a parameter to the request field it sets, in
// proto names ("regarding.kind", "labels[app]").
func queryFieldPath(md protoreflect.MessageDescriptor, key string) (string, error) {
	fieldKey, mapKey := key, ""
	if m := queryMapKeyRE.FindStringSubmatch(key); m != nil {
		fieldKey, mapKey = m[1], "["+m[2]+"]"
	}
	parts := strings.Split(fieldKey, ".")
	names := make([]string, len(parts))
	for i, part := range parts {
		fd := md.Fields().ByTextName(part)
		if fd == nil {
			fd = md.Fields().ByJSONName(part)
		}
		if fd == nil {
			return "", fmt.Errorf("is not a parameter of this request")
		}
		names[i] = string(fd.Name())
		if i == len(parts)-1 {
			if mapKey != "" && !fd.IsMap() {
				return "", fmt.Errorf("%s is not a map", strings.Join(parts[:i+1], "."))
			}
			break
		}
		if fd.Message() == nil || fd.IsList() || fd.IsMap() {
			return "", fmt.Errorf("is not a parameter of this request: %s has no fields", strings.Join(parts[:i+1], "."))
		}
		md = fd.Message()
	}
	return strings.Join(names, ".") + mapKey, nil
}

// queryParamError is a query parameter the request cannot take.
type queryParamError struct {
	Param, Description string
}

func (e *queryParamError) Error() string {
	return fmt.Sprintf("query parameter %q: %s", e.Param, e.Description)
}

// queryParamErrorRE reads a queryParamError back from the status message
// the generated handlers make of it.
var queryParamErrorRE = regexp.MustCompile(`^query parameter ("(?:[^"\\]|\\.)*"): (.*)$`)

// status is the InvalidArgument status of e, with a google.rpc.BadRequest
// naming the parameter.
func (e *queryParamError) status() *status.Status {
	return invalidField(e.Error(), e.Param, e.Description)
}

// queryParamStatus is the status of the queryParamError that the generated
// handlers turned into the message msg; ok is false for any other message.
func queryParamStatus(msg string) (st *status.Status, ok bool) {
	m := queryParamErrorRE.FindStringSubmatch(msg)
	if m == nil {
		return nil, false
	}
	param, err := strconv.Unquote(m[1])
	if err != nil {
		return nil, false
	}
	return (&queryParamError{Param: param, Description: m[2]}).status(), true
}

// useStrictQuery makes strictQuery grpc-gateway's query parameter parser.
// grpc-gateway keeps it in a package variable (SetQueryParameterParser
// sets it whatever mux it is given), so it is set once, before any REST
// handler of any gateway in the process runs.
var useStrictQuery = sync.OnceFunc(func() {
	runtime.NewServeMux(runtime.SetQueryParameterParser(strictQuery{}))
})
