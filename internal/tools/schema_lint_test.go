package tools

import (
	"encoding/json"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/sandboxer/sandboxer/internal/policy"
)

// TestSchemaLint is the repository's strict schema check (what an
// "inspector --strict" would ask of tools/list): it walks every tool's input
// and output schema as a client receives it and fails on
//
//   - an input property without a description (output fields carry names
//     and types only: their meaning is in the per-tool docs resources, and
//     prose there would cost every agent tokens on every turn);
//   - a type that is missing, a union (array), or null;
//   - an input string property whose description names a closed set
//     ("one of", "a or b or c") but has no enum;
//   - an input number or integer without a minimum;
//   - required naming a property that does not exist;
//   - an input object (the arguments, and any nested object) whose
//     additionalProperties is not false — except maps (env), whose
//     additionalProperties is the schema of their values;
//   - an enum of values not of the property's type.
func TestSchemaLint(t *testing.T) {
	for _, deps := range []Deps{{}, {Policy: policy.Default()}} {
		for _, tool := range All(deps) {
			data, err := json.Marshal(tool.Def)
			if err != nil {
				t.Fatal(err)
			}
			var wire struct {
				InputSchema  map[string]any `json:"inputSchema"`
				OutputSchema map[string]any `json:"outputSchema"`
			}
			if err := json.Unmarshal(data, &wire); err != nil {
				t.Fatal(err)
			}
			if wire.InputSchema == nil || wire.OutputSchema == nil {
				t.Errorf("%s: input or output schema missing", tool.Def.Name)
				continue
			}
			for _, p := range lintSchema(wire.InputSchema, "inputSchema", true, true) {
				t.Errorf("%s: %s", tool.Def.Name, p)
			}
			for _, p := range lintSchema(wire.OutputSchema, "outputSchema", false, true) {
				t.Errorf("%s: %s", tool.Def.Name, p)
			}
		}
	}
}

// closedSet finds descriptions that list a closed set of values in words.
var closedSet = regexp.MustCompile(`(?i)\bone of\b|\b\w+, \w+ or \w+\b`)

// lintSchema returns the problems of schema s at path; input when it
// describes arguments; root for the top object (which need no description).
func lintSchema(s map[string]any, path string, input, root bool) []string {
	var problems []string
	add := func(format string, args ...any) {
		problems = append(problems, path+": "+fmt.Sprintf(format, args...))
	}
	desc, _ := s["description"].(string)
	if input && !root && strings.TrimSpace(desc) == "" {
		add("no description")
	}
	var typ string
	switch tv := s["type"].(type) {
	case string:
		typ = tv
		if typ == "null" {
			add("type is null")
		}
	case nil:
		add("no type")
	case []any:
		add("type is a union %v: give one type (an optional argument is simply not required)", tv)
		return problems
	default:
		add("type is %T", tv)
	}
	if enum, ok := s["enum"].([]any); ok {
		for _, v := range enum {
			if !valueHasType(v, typ) {
				add("enum value %v is not a %s", v, typ)
			}
		}
	}
	switch typ {
	case "string":
		if input && s["enum"] == nil && closedSet.MatchString(desc) {
			add("description lists a closed set (%q) but there is no enum", desc)
		}
	case "number", "integer":
		if input && s["minimum"] == nil && s["exclusiveMinimum"] == nil {
			add("no minimum")
		}
	case "array":
		items, ok := s["items"].(map[string]any)
		if !ok {
			add("array without an items schema")
			break
		}
		for _, p := range lintSchema(withDescription(items, desc), path+".items", input, false) {
			problems = append(problems, p)
		}
	case "object":
		props, _ := s["properties"].(map[string]any)
		switch ap := s["additionalProperties"].(type) {
		case bool:
			if ap && input {
				add("additionalProperties is true: unknown arguments are refused, say so")
			}
		case map[string]any:
			if len(props) > 0 {
				add("additionalProperties is a schema on an object with properties")
			}
			// A map: its values' schema.
			for _, p := range lintSchema(withDescription(ap, desc), path+".additionalProperties", input, false) {
				problems = append(problems, p)
			}
		case nil:
			if input {
				add("additionalProperties not set: it must be false")
			}
		}
		names := make([]string, 0, len(props))
		for name := range props {
			names = append(names, name)
		}
		sort.Strings(names)
		for _, name := range names {
			prop, ok := props[name].(map[string]any)
			if !ok {
				add("property %s is not a schema", name)
				continue
			}
			problems = append(problems, lintSchema(prop, path+"."+name, input, false)...)
		}
		if req, ok := s["required"].([]any); ok {
			for _, r := range req {
				if _, ok := props[fmt.Sprint(r)]; !ok {
					add("required names %v, which is not a property", r)
				}
			}
		}
	}
	return problems
}

// withDescription gives an item or value schema its container's description
// when it has none: an item of a described list needs no description of its own.
func withDescription(s map[string]any, desc string) map[string]any {
	if _, ok := s["description"]; ok {
		return s
	}
	c := make(map[string]any, len(s)+1)
	for k, v := range s {
		c[k] = v
	}
	c["description"] = desc
	return c
}

func valueHasType(v any, typ string) bool {
	switch typ {
	case "string":
		_, ok := v.(string)
		return ok
	case "number":
		_, ok := v.(float64)
		return ok
	case "integer":
		f, ok := v.(float64)
		return ok && f == float64(int64(f))
	case "boolean":
		_, ok := v.(bool)
		return ok
	}
	return true
}

// TestSchemaLintCatches makes sure the lint finds what it is meant to find.
func TestSchemaLintCatches(t *testing.T) {
	var bad map[string]any
	if err := json.Unmarshal([]byte(`{
		"type": "object",
		"properties": {
			"a": {"type": ["null", "string"], "description": "x"},
			"b": {"type": "string"},
			"c": {"type": "integer", "description": "count"},
			"d": {"type": "string", "description": "one of x, y or z"},
			"e": {"type": "array", "items": {"type": "string", "enum": [1]}, "description": "list"},
			"f": {"description": "no type"}
		},
		"required": ["a", "zz"]
	}`), &bad); err != nil {
		t.Fatal(err)
	}
	got := strings.Join(lintSchema(bad, "in", true, true), "\n")
	for _, want := range []string{
		"in.a: type is a union", "in.b: no description", "in.c: no minimum",
		"in.d: description lists a closed set", "in.e.items: enum value 1 is not a string",
		"in.f: no type", "required names zz", "in: additionalProperties not set",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("lint did not report %q; it reported:\n%s", want, got)
		}
	}
}
