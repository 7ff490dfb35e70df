package tools

import (
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the schema snapshots in testdata/schemas")

// TestToolSchemasSnapshot keeps every tool's definition in a snapshot file, so
// any schema drift shows up in review. Run with -update to accept a change.
func TestToolSchemasSnapshot(t *testing.T) {
	seen := map[string]bool{}
	for _, tool := range All(Deps{}) {
		name := tool.Def.Name
		if seen[name] {
			t.Fatalf("tool %s defined twice", name)
		}
		seen[name] = true
		got, err := json.MarshalIndent(tool.Def, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, '\n')
		path := filepath.Join("testdata", "schemas", name+".json")
		if *update {
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, got, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%s: no snapshot (run go test ./internal/tools -run Snapshot -update): %v", name, err)
		}
		if string(got) != string(want) {
			t.Errorf("%s: schema changed; if intended, run go test ./internal/tools -run Snapshot -update\ngot:\n%s", name, got)
		}
	}
	files, _ := filepath.Glob(filepath.Join("testdata", "schemas", "*.json"))
	for _, f := range files {
		name := filepath.Base(f)
		name = name[:len(name)-len(".json")]
		if !seen[name] {
			t.Errorf("snapshot %s has no tool: delete it", f)
		}
	}
}

// TestToolContract checks what the tool contract requires of every tool:
// snake_case name, title, all four annotations set, input and output schemas.
func TestToolContract(t *testing.T) {
	for _, tool := range All(Deps{}) {
		d := tool.Def
		a := d.Annotations
		if d.Title == "" {
			t.Errorf("%s: no title", d.Name)
		}
		if a.Title != "" {
			t.Errorf("%s: annotations.title repeats the title in tools/list: leave it out", d.Name)
		}
		if a.ReadOnlyHint == nil || a.DestructiveHint == nil || a.IdempotentHint == nil || a.OpenWorldHint == nil {
			t.Errorf("%s: annotations not all set explicitly: %+v", d.Name, a)
		}
		if len(d.RawInputSchema) == 0 {
			t.Errorf("%s: no input schema", d.Name)
		}
		if d.OutputSchema.Type != "object" {
			t.Errorf("%s: no output schema", d.Name)
		}
		if d.Description == "" {
			t.Errorf("%s: no description", d.Name)
		}
		for _, r := range d.Name {
			if !(r >= 'a' && r <= 'z' || r == '_') {
				t.Errorf("%s: name is not snake_case", d.Name)
				break
			}
		}
		switch tool.Toolset {
		case ToolsetExec, ToolsetJobs, ToolsetInfo, ToolsetWorkspaces, ToolsetAdmin, ToolsetTemplates:
		default:
			t.Errorf("%s: unknown toolset %q", d.Name, tool.Toolset)
		}
	}
}
