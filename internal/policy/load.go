package policy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"sort"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Load returns Default() overlaid with the YAML file at path: a key the file
// names replaces the default, a key it leaves out keeps it. An empty file (or
// one holding only comments) changes nothing. The caller still calls ApplyEnv
// and Validate.
//
// The file is checked strictly, every error naming the file, the line and the
// dotted key: unknown keys, duplicate keys, a scalar where a mapping belongs
// (and vice versa), a fraction or a string where an integer belongs, an empty
// (null) scalar, YAML merge keys and more than one YAML document are all
// errors.
func Load(path string) (*Policy, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("policy: %w", err)
	}
	p, err := parse(data)
	if err != nil {
		// One line per problem, each naming the file.
		var errs []error
		if j, ok := err.(interface{ Unwrap() []error }); ok {
			errs = j.Unwrap()
		} else {
			errs = []error{err}
		}
		for i, e := range errs {
			errs[i] = fmt.Errorf("policy: %s: %w", path, e)
		}
		return nil, errors.Join(errs...)
	}
	return p, nil
}

// parse overlays data onto Default().
func parse(data []byte) (*Policy, error) {
	p := Default()

	// First pass: a yaml.Node tree, checked against the Policy type so errors
	// name the full key (yaml's own errors name only the Go type).
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return p, nil // empty document: no overrides
		}
		return nil, err
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		if err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("line %d: more than one YAML document; a policy file holds one", extra.Line)
	}
	root := &doc
	if root.Kind == yaml.DocumentNode {
		if len(root.Content) == 0 {
			return p, nil
		}
		root = root.Content[0]
	}
	if isNull(root) {
		return p, nil
	}
	var errs []error
	check(root, reflect.TypeOf(Policy{}), "", &errs)
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}

	// Second pass: the actual overlay, by yaml itself with KnownFields on (the
	// first pass already guarantees it succeeds; this is belt and braces).
	dec = yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(p); err != nil {
		return nil, err
	}
	if p.Languages == nil { // "languages:" with no value
		p.Languages = map[string]Language{}
	}
	if p.Templates == nil {
		p.Templates = map[string]Template{}
	}
	if p.Pool.Size == nil {
		p.Pool.Size = map[string]int{}
	}
	if p.Scripts.EnvFileDirs == nil {
		p.Scripts.EnvFileDirs = []string{}
	}
	if p.Block.Commands == nil {
		p.Block.Commands = []string{}
	}
	if p.Secrets == nil {
		p.Secrets = map[string]Secret{}
	}
	return p, nil
}

func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func nodeErr(n *yaml.Node, key, format string, args ...any) error {
	msg := fmt.Sprintf(format, args...)
	if key == "" {
		return fmt.Errorf("line %d: %s", n.Line, msg)
	}
	return fmt.Errorf("line %d: %s: %s", n.Line, key, msg)
}

// check walks n against type t (a struct, a map[string]struct, or a scalar
// of kind int/int64/float64/string), appending an error per problem.
func check(n *yaml.Node, t reflect.Type, path string, errs *[]error) {
	if n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	switch t.Kind() {
	case reflect.Struct, reflect.Map:
		if isNull(n) && path != "" {
			return // "limits:" with nothing under it: no overrides
		}
		if n.Kind != yaml.MappingNode {
			what := "the policy file"
			if path != "" {
				what = path
			}
			*errs = append(*errs, nodeErr(n, "", "%s: must be a mapping, got %s", what, describe(n)))
			return
		}
		seen := map[string]int{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			name := k.Value
			key := join(path, name)
			if k.Kind != yaml.ScalarNode {
				*errs = append(*errs, nodeErr(k, path, "keys must be plain names"))
				continue
			}
			if name == "<<" && k.ShortTag() == "!!merge" {
				*errs = append(*errs, nodeErr(k, key, "YAML merge keys are not supported"))
				continue
			}
			if first, dup := seen[name]; dup {
				*errs = append(*errs, nodeErr(k, key, "duplicate key (first at line %d)", first))
				continue
			}
			seen[name] = k.Line
			if t.Kind() == reflect.Map {
				check(v, t.Elem(), key, errs)
				continue
			}
			f, ok := fieldByTag(t, name)
			if !ok {
				*errs = append(*errs, nodeErr(k, key, "unknown key (known keys%s: %s)", under(path), strings.Join(tags(t), ", ")))
				continue
			}
			check(v, f.Type, key, errs)
		}
	case reflect.Slice:
		if isNull(n) {
			return
		}
		if n.Kind != yaml.SequenceNode {
			*errs = append(*errs, nodeErr(n, path, "must be a list, got %s", describe(n)))
			return
		}
		for i, v := range n.Content {
			check(v, t.Elem(), fmt.Sprintf("%s[%d]", path, i), errs)
		}
	default:
		if n.Kind != yaml.ScalarNode {
			*errs = append(*errs, nodeErr(n, path, "must be a single value, got %s", describe(n)))
			return
		}
		tag := n.ShortTag()
		if tag == "!!null" {
			*errs = append(*errs, nodeErr(n, path, "has no value (leave the key out to keep the default)"))
			return
		}
		switch t.Kind() {
		case reflect.Int, reflect.Int64:
			if tag != "!!int" {
				*errs = append(*errs, nodeErr(n, path, "must be a whole number, got %q", n.Value))
				return
			}
		case reflect.Float64:
			if tag != "!!int" && tag != "!!float" {
				*errs = append(*errs, nodeErr(n, path, "must be a number, got %q", n.Value))
				return
			}
		case reflect.Bool:
			if tag != "!!bool" {
				*errs = append(*errs, nodeErr(n, path, "must be true or false, got %q", n.Value))
				return
			}
		case reflect.String:
			if tag != "!!str" {
				*errs = append(*errs, nodeErr(n, path, "must be a string, got %s %q (quote it)", strings.TrimPrefix(tag, "!!"), n.Value))
				return
			}
		}
		v := reflect.New(t)
		if err := n.Decode(v.Interface()); err != nil {
			*errs = append(*errs, nodeErr(n, path, "invalid value %q", n.Value))
		}
	}
}

func under(path string) string {
	if path == "" {
		return " at the top level"
	}
	return " under " + path
}

func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		return fmt.Sprintf("%q", n.Value)
	}
	return "something else"
}

func fieldByTag(t reflect.Type, name string) (reflect.StructField, bool) {
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if tagName(f) == name {
			return f, true
		}
	}
	return reflect.StructField{}, false
}

func tagName(f reflect.StructField) string {
	name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
	return name
}

func tags(t reflect.Type) []string {
	var out []string
	for i := 0; i < t.NumField(); i++ {
		if n := tagName(t.Field(i)); n != "" && n != "-" {
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return out
}
