package tools

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/sandboxer/sandboxer/internal/lang"
	"github.com/sandboxer/sandboxer/internal/policy"
)

// Schemas are reflected from the argument and result structs (descriptions
// from their jsonschema tags), then made plain for the agents that read them:
//
//   - every property has exactly one type: the ["null", T] unions that pointer
//     fields reflect to are collapsed to T (an optional argument is simply not
//     required; a null argument is taken as omitted, see args.go);
//   - closed sets get an enum, ranges a minimum and maximum, and descriptions
//     that depend on the policy state its default and ceiling (param);
//   - inputs refuse unknown properties (additionalProperties: false).
//
// bind (args.go) checks arguments against the same schema, so what the schema
// says is what the server accepts.

// param refines one argument's schema beyond what its Go type says.
type param struct {
	desc string   // replaces the struct tag's description when set
	enum []string // closed set; for a list, the set of its items
	min  *float64
	max  *float64
	// byHandler: the handler checks enum and range itself, with a message
	// more useful than the generic one (the policy key of a ceiling, a
	// normalised signal name, list_languages); bind checks only the type.
	byHandler bool
	// absent, when set, leaves the argument out of the schema (the policy
	// gives it nothing to name, and every token counts); given anyway, it
	// is refused with this sentence.
	absent string
}

func between(lo, hi float64) param { return param{min: &lo, max: &hi} }

func atLeast(lo float64) param { return param{min: &lo} }

func oneOf(values ...string) param { return param{enum: values} }

func (p param) describe(format string, args ...any) param {
	p.desc = fmt.Sprintf(format, args...)
	return p
}

// absentBecause leaves the argument out of the schema; see param.absent.
func absentBecause(format string, args ...any) param {
	return param{absent: fmt.Sprintf(format, args...)}
}

func (p param) checkedByHandler() param {
	p.byHandler = true
	return p
}

// num formats a number for a description or a message.
func num(v float64) string {
	if v == math.Trunc(v) && math.Abs(v) < 1e15 {
		return strconv.FormatInt(int64(v), 10)
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}

// argSchema is a tool's input schema plus what bind needs to check arguments.
type argSchema struct {
	schema    *jsonschema.Schema
	raw       json.RawMessage
	byHandler map[string]bool
	absent    map[string]string // argument -> why it is not in the schema
}

// inputSchema reflects T's schema and refines it with params (by property
// name). A param naming no property is a programming error: it panics, and
// every test that builds the tools catches it.
func inputSchema[T any](params map[string]param) *argSchema {
	s, err := jsonschema.For[T](nil)
	if err != nil {
		panic(fmt.Sprintf("input schema of %T: %v", *new(T), err))
	}
	plain(s)
	if s.Properties == nil {
		s.Properties = map[string]*jsonschema.Schema{}
	}
	s.AdditionalProperties = &jsonschema.Schema{Not: &jsonschema.Schema{}} // false
	a := &argSchema{schema: s, byHandler: map[string]bool{}, absent: map[string]string{}}
	for name, p := range params {
		prop, ok := s.Properties[name]
		if !ok {
			panic(fmt.Sprintf("input schema of %T: param %q is not a property", *new(T), name))
		}
		if p.absent != "" {
			delete(s.Properties, name)
			a.absent[name] = p.absent
			continue
		}
		if p.desc != "" {
			prop.Description = p.desc
		}
		target := prop
		if prop.Type == "array" {
			target = prop.Items
		}
		if len(p.enum) > 0 {
			target.Enum = nil
			for _, v := range p.enum {
				target.Enum = append(target.Enum, v)
			}
		}
		target.Minimum, target.Maximum = p.min, p.max
		a.byHandler[name] = p.byHandler
	}
	raw, err := json.Marshal(s)
	if err != nil {
		panic(fmt.Sprintf("input schema of %T: %v", *new(T), err))
	}
	a.raw = raw
	return a
}

// withInput declares the input schema on a tool.
func withInput(a *argSchema) mcp.ToolOption {
	return func(t *mcp.Tool) {
		t.InputSchema = mcp.ToolInputSchema{} // mcp.NewTool's default; the raw schema replaces it
		t.RawInputSchema = a.raw
	}
}

// withOutput declares T's reflected schema as the output schema, made plain
// and compact: clients validate results against it, and agents pay for every
// character of it on every turn, so it lists the top-level fields by name and
// type, with nested objects left open (the per-tool docs resources describe
// every field; get_job describes the job record).
func withOutput[T any](opts ...outputOption) mcp.ToolOption {
	shrink := summaryOutput
	for _, o := range opts {
		shrink = o(shrink)
	}
	return outputSchema[T](shrink)
}

// outputOption changes how an output schema is shrunk.
type outputOption func(func(*jsonschema.Schema, int)) func(*jsonschema.Schema, int)

// withoutFields leaves the result an open object: for a tool whose result
// another tool's schema already spells out (kill_job returns get_job's record).
func withoutFields() outputOption {
	return func(func(*jsonschema.Schema, int)) func(*jsonschema.Schema, int) {
		return func(s *jsonschema.Schema, _ int) { *s = jsonschema.Schema{Type: "object"} }
	}
}

// withDescribedOutput is compact too, but keeps the descriptions of the named
// top-level fields, whose values need saying: for the one tool whose result
// is the point (get_job's job record).
func withDescribedOutput[T any](keep ...string) mcp.ToolOption {
	return outputSchema[T](func(s *jsonschema.Schema, depth int) {
		kept := map[string]string{}
		for _, name := range keep {
			p, ok := s.Properties[name]
			if !ok {
				panic(fmt.Sprintf("output schema of %T: %q is not a property", *new(T), name))
			}
			kept[name] = p.Description
		}
		compactOutput(s, depth)
		for name, desc := range kept {
			s.Properties[name].Description = desc
		}
	})
}

func outputSchema[T any](shrink func(*jsonschema.Schema, int)) mcp.ToolOption {
	s, err := jsonschema.For[T](nil)
	if err != nil {
		panic(fmt.Sprintf("output schema of %T: %v", *new(T), err))
	}
	plain(s)
	if shrink != nil {
		shrink(s, 0)
	}
	raw, err := json.Marshal(s)
	if err != nil {
		panic(fmt.Sprintf("output schema of %T: %v", *new(T), err))
	}
	return func(t *mcp.Tool) {
		if err := json.Unmarshal(raw, &t.OutputSchema); err != nil {
			panic(fmt.Sprintf("output schema of %T: %v", *new(T), err))
		}
		t.OutputSchema.Type = "object"
		t.OutputSchema.PropertyOrder = nil // properties by name, as mcp-go emits them
	}
}

// compactOutput drops descriptions, the closing of objects (a result may
// grow a field without breaking a client) and nested required lists (the top
// level keeps its required fields).
func compactOutput(s *jsonschema.Schema, depth int) {
	if s == nil {
		return
	}
	s.Description = ""
	s.AdditionalProperties = nil
	if depth > 0 {
		s.Required = nil
	}
	compactOutput(s.Items, depth+1)
	for _, p := range s.Properties {
		compactOutput(p, depth+1)
	}
}

// summaryOutput is compactOutput with nested objects left open.
func summaryOutput(s *jsonschema.Schema, depth int) {
	compactOutput(s, depth)
	for _, p := range s.Properties {
		if p.Type == "object" || p.Type == "array" && p.Items != nil && p.Items.Type == "object" {
			p.Properties, p.Items = nil, nil
			if p.Type == "array" {
				p.Items = &jsonschema.Schema{Type: "object"}
			}
		}
	}
}

// plain collapses ["null", T] type unions to T, everywhere in s.
func plain(s *jsonschema.Schema) {
	if s == nil {
		return
	}
	if len(s.Types) > 0 {
		types := slices.DeleteFunc(slices.Clone(s.Types), func(t string) bool { return t == "null" })
		if len(types) == 1 {
			s.Type, s.Types = types[0], nil
		} else {
			s.Types = types
		}
	}
	plain(s.Items)
	plain(s.AdditionalProperties)
	for _, p := range s.Properties {
		plain(p)
	}
	for _, d := range s.Defs {
		plain(d)
	}
}

// policyOrDefault is the policy the schemas state: the server's, or the
// built-in defaults when there is none (the schema snapshot builds tools
// from an empty Deps).
// lacks is the refusal of a feature whose seam this server's runtime does
// not implement (a nil manager in Deps): it names the server's backend
// (docs/engines.md says which backend has what).
func (d Deps) lacks(feature string) string {
	return fmt.Sprintf("%s are not available on this server (backend %s, docs/engines.md)", feature, d.policyOrDefault().Backend)
}

func (d Deps) policyOrDefault() *policy.Policy {
	if d.Policy != nil {
		return d.Policy
	}
	return policy.Default()
}

// languageNames are the language registry's names in their declared order
// (the default first).
func (d Deps) languageNames() []string {
	reg := d.Languages
	if reg == nil {
		reg = lang.NewRegistry(nil, nil)
	}
	var names []string
	for _, l := range reg.All() {
		names = append(names, l.Name)
	}
	return append(names, reg.TemplateNames()...)
}

// waitParam describes wait_s for a call whose default wait is def seconds.
func waitParam(pol *policy.Policy, what string, def float64) param {
	return between(0, float64(pol.Jobs.MaxWaitS)).checkedByHandler().describe(
		"%s; default %s", what, num(def))
}

// Per-request floors the policy enforces (internal/policy: minTimeoutS,
// minMemoryMB, minCPUs, minPids), stated as the schemas' minimums.
const (
	minTimeoutS = 0.1
	minMemoryMB = 16
	minCPUs     = 0.01
	minPids     = 16
)
