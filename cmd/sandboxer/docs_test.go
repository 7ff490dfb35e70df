package main

import (
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/sandboxer/sandboxer/internal/config"
	"github.com/sandboxer/sandboxer/internal/policy"
	"github.com/sandboxer/sandboxer/internal/tools"
)

// TestDocsCoverDocsDir: every tool, every command-line flag and every policy
// key appears in docs/, so that the docs cannot fall behind the code.
func TestDocsCoverDocsDir(t *testing.T) {
	docs := readDocs(t, filepath.Join("..", "..", "docs"))
	for _, tool := range tools.All(tools.Deps{}) {
		if !strings.Contains(docs, "`"+tool.Def.Name+"`") {
			t.Errorf("tool %s is not in docs/", tool.Def.Name)
		}
	}
	for _, name := range flagNames(t) {
		if !strings.Contains(docs, "--"+name) {
			t.Errorf("flag --%s is not in docs/", name)
		}
	}
	for _, key := range policyKeys(reflect.TypeOf(policy.Policy{}), "") {
		if !strings.Contains(docs, key) {
			t.Errorf("policy key %s is not in docs/", key)
		}
	}
}

func readDocs(t *testing.T, dir string) string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.md"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no docs in %s: %v", dir, err)
	}
	var b strings.Builder
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		b.Write(data)
	}
	return b.String()
}

// flagDef finds the flags each subcommand defines on its own flag set.
var flagDef = regexp.MustCompile(`fs\.(?:String|Bool|Int|Int64|Duration|Float64)\("([a-z0-9-]+)"`)

// flagNames are serve's flags and those the subcommands define.
func flagNames(t *testing.T) []string {
	t.Helper()
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	config.RegisterFlags(fs)
	var names []string
	fs.VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
	sources, _ := filepath.Glob("*.go")
	for _, src := range sources {
		if strings.HasSuffix(src, "_test.go") {
			continue
		}
		data, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range flagDef.FindAllStringSubmatch(string(data), -1) {
			names = append(names, m[1])
		}
	}
	return names
}

// policyKeys are the dotted yaml keys of a policy struct; a default/max pair
// (Range) is one key, and a map is named by its own key.
func policyKeys(t reflect.Type, prefix string) []string {
	var keys []string
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag := strings.Split(f.Tag.Get("yaml"), ",")[0]
		if tag == "" || tag == "-" {
			continue
		}
		key := prefix + tag
		ft := f.Type
		if ft.Kind() == reflect.Struct && ft != reflect.TypeOf(policy.Range{}) && ft != reflect.TypeOf(policy.FloatRange{}) {
			keys = append(keys, policyKeys(ft, key+".")...)
			continue
		}
		keys = append(keys, key)
	}
	return keys
}

// TestDocsCoverageSeesWhatExists: the lists the coverage test checks are
// not empty (a broken walk would pass vacuously).
func TestDocsCoverageSeesWhatExists(t *testing.T) {
	keys := policyKeys(reflect.TypeOf(policy.Policy{}), "")
	flags := flagNames(t)
	if len(keys) < 30 || !slices.Contains(keys, "limits.timeout_s") || !slices.Contains(keys, "workspaces.install_ca_file") {
		t.Errorf("policy keys: %v", keys)
	}
	if !slices.Contains(flags, "toolsets") || !slices.Contains(flags, "force") || !slices.Contains(flags, "since") {
		t.Errorf("flags: %v", flags)
	}
}
