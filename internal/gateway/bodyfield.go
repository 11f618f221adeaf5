package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"regexp"
	"strconv"
	"unicode/utf8"

	"google.golang.org/protobuf/reflect/protoreflect"
)

// bodyFieldError is a request body that did not decode, with the field it
// stopped at, as the caller spelled it ("events[0].eventTime",
// "events[0].labels[app]").
type bodyFieldError struct {
	Field string
	Err   error
}

func (e *bodyFieldError) Error() string { return "request body: " + e.Field + ": " + e.Err.Error() }

func (e *bodyFieldError) Unwrap() error { return e.Err }

// decodePosRE finds where in the body a protojson error is.
var decodePosRE = regexp.MustCompile(`\(line (\d+):(\d+)\)`)

// withBodyField names the field of body (the JSON of a message md) at which
// the protojson error err stopped; err as it is when it says no position.
func withBodyField(body []byte, md protoreflect.MessageDescriptor, err error) error {
	m := decodePosRE.FindStringSubmatch(err.Error())
	if m == nil {
		return err
	}
	line, _ := strconv.Atoi(m[1])
	col, _ := strconv.Atoi(m[2])
	off := offsetOf(body, line, col)
	if off < 0 {
		return err
	}
	if f := fieldAt(body, md, off); f != "" {
		return &bodyFieldError{Field: f, Err: err}
	}
	return err
}

// offsetOf is the byte offset of a 1-based line and rune column, as
// protojson reports them; -1 when body has no such position.
func offsetOf(body []byte, line, col int) int {
	off := 0
	for l := 1; l < line; l++ {
		i := bytes.IndexByte(body[off:], '\n')
		if i < 0 {
			return -1
		}
		off += i + 1
	}
	for c := 1; c < col; c++ {
		if off >= len(body) {
			return -1
		}
		_, n := utf8.DecodeRune(body[off:])
		off += n
	}
	return off
}

// jsonFrame is an object or a list fieldAt is in.
type jsonFrame struct {
	array   bool
	idx     int
	key     string // the last key read, in an object
	wantKey bool
	md      protoreflect.MessageDescriptor // the message this object is, if known
	isMap   bool                           // this object is a map field's value
	path    string                         // of this object or list
}

// child is the path and descriptor of the value about to be read in f
// (after its key, or as its next element).
func (f *jsonFrame) child() (path string, md protoreflect.MessageDescriptor, isMap, isList bool) {
	if f.array {
		return f.path + "[" + strconv.Itoa(f.idx) + "]", f.md, false, false
	}
	if f.isMap {
		return f.path + "[" + f.key + "]", f.md, false, false
	}
	path = f.key
	if f.path != "" {
		path = f.path + "." + f.key
	}
	if f.md == nil {
		return path, nil, false, false
	}
	fd := f.md.Fields().ByJSONName(f.key)
	if fd == nil {
		fd = f.md.Fields().ByTextName(f.key)
	}
	if fd == nil {
		return path, nil, false, false
	}
	switch {
	case fd.IsMap():
		if v := fd.MapValue(); v.Kind() == protoreflect.MessageKind {
			return path, v.Message(), true, false
		}
		return path, nil, true, false
	case fd.Kind() == protoreflect.MessageKind || fd.Kind() == protoreflect.GroupKind:
		return path, fd.Message(), false, fd.IsList()
	}
	return path, nil, false, fd.IsList()
}

// fieldAt is the path of the field whose key or value holds the byte at off
// in body, the JSON of a message md. Keys that name a field of the message
// in scope are followed into it; the entries of a map field are written
// field[key], list elements field[i].
func fieldAt(body []byte, md protoreflect.MessageDescriptor, off int) string {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var stack []*jsonFrame
	for {
		tok, err := dec.Token()
		if err != nil {
			return ""
		}
		var path string
		if len(stack) > 0 {
			f := stack[len(stack)-1]
			switch {
			case f.array:
				if d, ok := tok.(json.Delim); !ok || d != ']' {
					f.idx++
				}
			case f.wantKey:
				if k, ok := tok.(string); ok {
					f.key, f.wantKey = k, false
					if dec.InputOffset() > int64(off) {
						p, _, _, _ := f.child()
						return p
					}
					continue
				}
			}
		}
		if d, ok := tok.(json.Delim); ok && (d == '}' || d == ']') {
			stack = stack[:len(stack)-1]
			if len(stack) > 0 && !stack[len(stack)-1].array {
				stack[len(stack)-1].wantKey = true
			}
			if dec.InputOffset() > int64(off) {
				return ""
			}
			continue
		}
		var cmd protoreflect.MessageDescriptor
		var isMap, isList bool
		if len(stack) == 0 {
			cmd = md
		} else {
			path, cmd, isMap, isList = stack[len(stack)-1].child()
		}
		if dec.InputOffset() > int64(off) {
			return path
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, &jsonFrame{wantKey: true, md: cmd, isMap: isMap, path: path})
		case json.Delim('['):
			elem := cmd
			if !isList {
				elem = nil
			}
			stack = append(stack, &jsonFrame{array: true, idx: -1, md: elem, path: path})
		default:
			if f := stack[len(stack)-1]; !f.array {
				f.wantKey = true
			}
		}
	}
}

// bodyField is the field a body decode error names, if it names one.
func bodyField(err error) (string, bool) {
	var fe *bodyFieldError
	if errors.As(err, &fe) {
		return fe.Field, true
	}
	return "", false
}
