package rule

import (
	"errors"
	"fmt"
	"strings"
	"text/template"
)

// DefaultTemplate is the message of a rule without one.
const DefaultTemplate = `[{{.State}}] {{.Rule}}: {{with .Event}}{{.Type}} {{.Reason}} on {{.Regarding.Kind}} {{with .Regarding.Namespace}}{{.}}/{{end}}{{.Regarding.Name}}: {{.Note}}{{end}}{{if gt .Count 1}} ({{.Count}} times){{end}}`

// CompileTemplate parses a rule's template; the error names what is wrong.
func CompileTemplate(text string) (*template.Template, error) {
	if text == "" {
		text = DefaultTemplate
	}
	t, err := template.New("message").Option("missingkey=zero").Funcs(safeFuncs).Parse(text)
	if err != nil {
		return nil, fieldErr("template", "%v", strings.TrimPrefix(err.Error(), "template: "))
	}
	return t, nil
}

// safeFuncs replace the printing builtins with ones that refuse a width
// or precision over 1024 (or taken from an argument): "%999999999d" would
// allocate a gigabyte before a single byte reached the buffer.
var safeFuncs = template.FuncMap{
	"printf": func(format string, args ...any) (string, error) {
		if err := checkFormat(format); err != nil {
			return "", err
		}
		return fmt.Sprintf(format, args...), nil
	},
}

func checkFormat(format string) error {
	for i := 0; i < len(format); i++ {
		if format[i] != '%' {
			continue
		}
		n := 0
		for i++; i < len(format); i++ {
			c := format[i]
			switch {
			case c == '*':
				return errors.New("printf: widths from arguments are not allowed")
			case c >= '0' && c <= '9':
				n = n*10 + int(c-'0')
				if n > 1024 {
					return errors.New("printf: widths and precisions are at most 1024")
				}
				continue
			case c == '.':
				n = 0
				continue
			case strings.ContainsRune("+-# ", rune(c)):
				continue
			}
			break
		}
	}
	return nil
}
