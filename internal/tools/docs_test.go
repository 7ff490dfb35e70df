package tools

import (
	"encoding/json"
	"io/fs"
	"strings"
	"testing"
)

// TestEveryToolHasDocs: each tool's docs resource exists, names the tool and
// every one of its arguments, and no docs page is left for a tool that is gone.
func TestEveryToolHasDocs(t *testing.T) {
	names := map[string]bool{}
	for _, tool := range All(Deps{}) {
		name := tool.Def.Name
		names[name] = true
		doc, ok := Doc(name)
		if !ok {
			t.Errorf("%s: no docs page (internal/tools/docs/%s.md)", name, name)
			continue
		}
		if !strings.HasPrefix(doc, "# "+name+"\n") {
			t.Errorf("%s: docs page does not start with its name", name)
		}
		if !strings.Contains(tool.Def.Description, DocURIPrefix+name) {
			t.Errorf("%s: description does not name its docs resource %s%s", name, DocURIPrefix, name)
		}
		var in struct {
			Properties map[string]any `json:"properties"`
		}
		if err := json.Unmarshal(tool.Def.RawInputSchema, &in); err != nil {
			t.Fatal(err)
		}
		for arg := range in.Properties {
			if !strings.Contains(doc, "`"+arg+"`") {
				t.Errorf("%s: docs page does not describe argument %s", name, arg)
			}
		}
	}
	pages, _ := fs.Glob(docFiles, "docs/*.md")
	for _, p := range pages {
		if n := strings.TrimSuffix(strings.TrimPrefix(p, "docs/"), ".md"); !names[n] {
			t.Errorf("docs page %s has no tool", p)
		}
	}
	for _, bad := range []string{"", "../tools", "run_command.md", "nope"} {
		if _, ok := Doc(bad); ok {
			t.Errorf("Doc(%q) found a page", bad)
		}
	}
}
