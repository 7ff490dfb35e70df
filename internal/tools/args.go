package tools

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/mark3labs/mcp-go/mcp"
)

// bind checks a call's arguments against the tool's input schema and decodes
// them into target. Arguments are taken as agents write them:
//
//   - a null argument is taken as omitted;
//   - a single value where a list is expected is a list of that one value
//     ({"status": "running"} is {"status": ["running"]});
//   - a whole number written as 5.0 is 5.
//
// Everything else the schema does not allow is refused with sentences naming
// the argument: unknown arguments (with the known ones), missing required
// ones, wrong types (what was expected and what was given), values outside an
// enum or a range. All problems are reported at once, so one retry can fix
// them. The server does this instead of mcp-go's input schema validation,
// whose messages are not meant for agents and which runs before any coercion.
func (a *argSchema) bind(req mcp.CallToolRequest, target any) error {
	args, err := a.check(req.GetRawArguments())
	if err != nil {
		return err
	}
	raw, err := json.Marshal(args)
	if err != nil {
		return fmt.Errorf("the arguments could not be read: %s", cleanMessage(err.Error()))
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	dec.UseNumber()
	if err := dec.Decode(target); err != nil {
		// check accepted what the struct cannot hold: a schema/struct mismatch.
		return fmt.Errorf("the arguments could not be read: %s", cleanMessage(err.Error()))
	}
	return nil
}

// check validates and normalises raw arguments into a JSON object.
func (a *argSchema) check(rawArgs any) (map[string]any, error) {
	var v any
	switch r := rawArgs.(type) {
	case nil:
	case json.RawMessage:
		if len(bytes.TrimSpace(r)) > 0 {
			if err := decodeNumbers(r, &v); err != nil {
				return nil, errors.New("the arguments are not valid JSON")
			}
		}
	default:
		data, err := json.Marshal(r)
		if err != nil {
			return nil, errors.New("the arguments could not be read as JSON")
		}
		if err := decodeNumbers(data, &v); err != nil {
			return nil, errors.New("the arguments are not valid JSON")
		}
	}
	if v == nil {
		v = map[string]any{}
	}
	args, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("the arguments must be an object of named arguments, not %s", describeValue(v))
	}
	s := a.schema
	var problems []string

	var unknown []string
	for name, val := range args {
		if val == nil {
			delete(args, name) // null: omitted
			continue
		}
		if why, ok := a.absent[name]; ok {
			problems = append(problems, fmt.Sprintf("%s: %s", name, why))
			delete(args, name)
		} else if _, ok := s.Properties[name]; !ok {
			unknown = append(unknown, name)
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		quoted := make([]string, len(unknown))
		for i, u := range unknown {
			quoted[i] = fmt.Sprintf("%q", truncate(u, 64))
		}
		known := a.names()
		switch {
		case len(known) == 0:
			problems = append(problems, fmt.Sprintf("this tool takes no arguments; %s given", strings.Join(quoted, ", ")))
		case len(unknown) == 1:
			problems = append(problems, fmt.Sprintf("argument %s is not known; known: %s", quoted[0], strings.Join(known, ", ")))
		default:
			problems = append(problems, fmt.Sprintf("arguments %s are not known; known: %s", strings.Join(quoted, ", "), strings.Join(known, ", ")))
		}
		for _, u := range unknown {
			delete(args, u)
		}
	}
	for _, name := range s.Required {
		if _, ok := args[name]; !ok {
			msg := "argument " + name + " is required"
			if d := s.Properties[name].Description; d != "" {
				msg += " (" + d + ")"
			}
			problems = append(problems, msg)
		}
	}
	for _, name := range a.names() {
		val, ok := args[name]
		if !ok {
			continue
		}
		norm, problem := a.value(name, s.Properties[name], val)
		if problem != "" {
			problems = append(problems, problem)
			continue
		}
		args[name] = norm
	}
	if len(problems) > 0 {
		return nil, errors.New(strings.Join(problems, "; "))
	}
	return args, nil
}

// names lists the properties in their declared order.
func (a *argSchema) names() []string {
	s := a.schema
	names := slices.Clone(s.PropertyOrder)
	for name := range s.Properties {
		if !slices.Contains(names, name) {
			names = append(names, name)
		}
	}
	if len(names) > len(s.PropertyOrder) {
		sort.Strings(names[len(s.PropertyOrder):])
	}
	return names
}

func decodeNumbers(data []byte, v *any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	return dec.Decode(v)
}

// value checks one argument against its schema and returns it normalised, or
// a sentence saying what is wrong.
func (a *argSchema) value(name string, s *jsonschema.Schema, v any) (any, string) {
	if s.Type == "array" {
		list, ok := v.([]any)
		if !ok {
			list = []any{v} // one value where a list is expected
		}
		for i, item := range list {
			norm, problem := a.scalar(name, s.Items, item, true)
			if problem != "" {
				return nil, problem
			}
			list[i] = norm
		}
		return list, ""
	}
	return a.scalar(name, s, v, false)
}

// scalar checks a value that is not a list; inList when it is an item of one.
func (a *argSchema) scalar(name string, s *jsonschema.Schema, v any, inList bool) (any, string) {
	want := typeName(s.Type)
	if inList {
		want += " or a list of " + pluralName(s.Type)
	}
	wrongType := func() (any, string) {
		return nil, fmt.Sprintf("argument %s must be %s, not %s", name, want, describeValue(v))
	}
	checkEnum := len(s.Enum) > 0 && !a.byHandler[name]
	checkRange := !a.byHandler[name]
	switch s.Type {
	case "string":
		str, ok := v.(string)
		if !ok {
			return wrongType()
		}
		if checkEnum && !slices.Contains(s.Enum, any(str)) {
			return nil, fmt.Sprintf("%s %q is not one of %s", name, truncate(str, 64), enumList(s.Enum))
		}
		return str, ""
	case "boolean":
		b, ok := v.(bool)
		if !ok {
			return wrongType()
		}
		return b, ""
	case "integer", "number":
		n, ok := v.(json.Number)
		if !ok {
			return wrongType()
		}
		f, err := n.Float64()
		if err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
			return nil, fmt.Sprintf("argument %s must be a finite number, not %s", name, truncate(n.String(), 32))
		}
		var out any = n
		if s.Type == "integer" {
			if f != math.Trunc(f) || math.Abs(f) >= 1<<63 {
				return nil, fmt.Sprintf("argument %s must be a whole number, not %s", name, truncate(n.String(), 32))
			}
			i, err := n.Int64()
			if err != nil {
				i = int64(f) // written as 5.0 or 5e3
			}
			out = i
		}
		if checkRange {
			if problem := rangeProblem(name, n.String(), f, s); problem != "" {
				return nil, problem
			}
		}
		return out, ""
	case "object":
		obj, ok := v.(map[string]any)
		if !ok {
			return nil, fmt.Sprintf("argument %s must be an object of names to %ss, not %s", name, typeName(s.AdditionalProperties.Type), describeValue(v))
		}
		for k, item := range obj {
			if s.AdditionalProperties == nil || s.AdditionalProperties.Type != "string" {
				break
			}
			if _, ok := item.(string); !ok {
				return nil, fmt.Sprintf("%s value of %q must be a string, not %s", name, truncate(k, 64), describeValue(item))
			}
		}
		return obj, ""
	}
	return v, ""
}

func rangeProblem(name, text string, f float64, s *jsonschema.Schema) string {
	low := s.Minimum != nil && f < *s.Minimum
	high := s.Maximum != nil && f > *s.Maximum
	if !low && !high {
		return ""
	}
	text = truncate(text, 32)
	switch {
	case s.Minimum != nil && s.Maximum != nil:
		return fmt.Sprintf("%s %s is out of range: %s to %s", name, text, num(*s.Minimum), num(*s.Maximum))
	case low:
		return fmt.Sprintf("%s %s is out of range: it must be at least %s", name, text, num(*s.Minimum))
	default:
		return fmt.Sprintf("%s %s is out of range: it must be at most %s", name, text, num(*s.Maximum))
	}
}

func pluralName(t string) string {
	switch t {
	case "integer":
		return "integers"
	case "":
		return "values"
	}
	return t + "s"
}

func typeName(t string) string {
	switch t {
	case "integer":
		return "an integer (a whole number)"
	case "object":
		return "an object"
	case "array":
		return "a list"
	case "":
		return "a value"
	}
	return "a " + t
}

// describeValue names what an agent sent, for "must be X, not Y".
func describeValue(v any) string {
	switch x := v.(type) {
	case string:
		return fmt.Sprintf("the string %q", truncate(x, 32))
	case json.Number:
		return "the number " + truncate(x.String(), 32)
	case float64:
		return "the number " + num(x)
	case bool:
		return fmt.Sprint(x)
	case []any:
		return "a list"
	case map[string]any:
		return "an object"
	case nil:
		return "null"
	}
	return fmt.Sprintf("%T", v)
}

func enumList(values []any) string {
	parts := make([]string, len(values))
	for i, v := range values {
		parts[i] = fmt.Sprint(v)
	}
	return strings.Join(parts, ", ")
}
