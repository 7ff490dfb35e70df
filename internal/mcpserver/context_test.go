package mcpserver

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/sandboxer/sandboxer/internal/tools"
)

// TestInstructions: initialize's instructions tell the whole story in at most 600 characters.
func TestInstructions(t *testing.T) {
	if n := len(Instructions); n > 600 {
		t.Errorf("instructions are %d characters; at most 600", n)
	}
	for _, want := range []string{"run_command", "run_script", "wait_s", "job_id", "read_output", "start_session", "send_input", "create_workspace", "sandboxer://docs/"} {
		if !strings.Contains(Instructions, want) {
			t.Errorf("instructions do not mention %s", want)
		}
	}
}

// TestToolsetPresets: every preset resolves to known tools, single sets still
// work, an unknown name is refused naming the choices; the cost of each preset
// in tools/list is logged (docs/tools.md quotes it).
func TestToolsetPresets(t *testing.T) {
	known := map[string]bool{}
	for _, tool := range tools.All(tools.Deps{}) {
		known[tool.Def.Name] = true
	}
	costs := map[string]int{}
	for _, name := range append(PresetNames(), Toolsets...) {
		sel, err := selectTools([]string{name})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for _, tn := range Presets[name].Tools {
			if !known[tn] {
				t.Errorf("preset %s names unknown tool %s", name, tn)
			}
		}
		n, cost := 0, 0
		for _, tool := range tools.All(tools.Deps{}) {
			if sel.enabled(tool) {
				b, _ := json.Marshal(tool.Def)
				n, cost = n+1, cost+(len(b)+3)/4
			}
		}
		if n == 0 {
			t.Errorf("%s enables no tool", name)
		}
		costs[fmt.Sprintf("%s (%d tools)", name, n)] = cost
	}
	var rows []string
	for k, v := range costs {
		rows = append(rows, fmt.Sprintf("%-24s %5d tokens", k, v))
	}
	sort.Strings(rows)
	t.Logf("tools/list cost by --toolsets value:\n%s", strings.Join(rows, "\n"))
	if _, err := selectTools([]string{"everything"}); err == nil || !strings.Contains(err.Error(), "minimal") || !strings.Contains(err.Error(), "exec") {
		t.Errorf("unknown toolset: %v, want an error naming the toolsets and presets", err)
	}
	// A preset and a set combine.
	sel, _ := selectTools([]string{"minimal", "info"})
	for _, tool := range tools.All(tools.Deps{}) {
		want := tool.Toolset == tools.ToolsetInfo || slices.Contains(Presets["minimal"].Tools, tool.Def.Name)
		if sel.enabled(tool) != want {
			t.Errorf("minimal,info: %s enabled %v", tool.Def.Name, !want)
		}
	}
}

// TestDocsResources: each listed tool's docs resource is listed and readable.
func TestDocsResources(t *testing.T) {
	ts := startTestServer(t, &fakeRuntime{})
	ts.initialize()
	list := decodeReply(t, ts.call(`1`, "resources/list", `{}`))
	if list.Error != nil || !strings.Contains(string(list.Result), tools.DocURIPrefix+"run_command") {
		t.Fatalf("resources/list does not name the docs: %s", list.Result)
	}
	r := decodeReply(t, ts.call(`2`, "resources/read", `{"uri":"sandboxer://docs/run_command"}`))
	if r.Error != nil || !strings.Contains(string(r.Result), "wait_s") {
		t.Fatalf("docs of run_command: %+v %s", r.Error, r.Result)
	}
}
