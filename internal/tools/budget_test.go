package tools

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"
)

// The tool list is put into an agent's context on every turn: it has a
// budget, counted as a client receives it (compact JSON, 4 characters a token).
// The list's budget is the rule; the per-tool one keeps any tool from
// growing unnoticed (run_script, with the most arguments, is nearest to it).
const (
	toolListBudgetTokens = 9000
	toolBudgetTokens     = 700
)

// toolTokens is what one tool costs in tools/list.
func toolTokens(t *testing.T, tool Tool) int {
	t.Helper()
	b, err := json.Marshal(tool.Def)
	if err != nil {
		t.Fatal(err)
	}
	return (len(b) + 3) / 4
}

// TestToolListBudget holds the default tools/list (every toolset but those
// off by default) to its budget. It is a size check: the table it logs is
// what the docs quote.
func TestToolListBudget(t *testing.T) {
	type row struct {
		name   string
		tokens int
	}
	var rows []row
	total := 0
	offByDefault := 0
	for _, tool := range All(Deps{}) {
		n := toolTokens(t, tool)
		rows = append(rows, row{tool.Def.Name, n})
		if n > toolBudgetTokens {
			t.Errorf("%s costs %d tokens in tools/list; the budget is %d a tool: shorten its descriptions (details go to its docs resource)", tool.Def.Name, n, toolBudgetTokens)
		}
		if slices.Contains(OffByDefault, tool.Toolset) {
			offByDefault += n
			continue
		}
		total += n
	}
	if total > toolListBudgetTokens {
		t.Errorf("the default tools/list costs %d tokens; the budget is %d", total, toolListBudgetTokens)
	}
	// The secrets argument enters four schemas only when the policy names
	// secrets: with two (and an egress list), the list still fits.
	withSecrets := 0
	for _, tool := range All(secretsDeps()) {
		if !slices.Contains(OffByDefault, tool.Toolset) {
			withSecrets += toolTokens(t, tool)
		}
	}
	if withSecrets > toolListBudgetTokens {
		t.Errorf("tools/list costs %d tokens with two secrets in the policy; the budget is %d", withSecrets, toolListBudgetTokens)
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].tokens > rows[j].tokens })
	var b strings.Builder
	for _, r := range rows {
		fmt.Fprintf(&b, "%-24s %4d\n", r.name, r.tokens)
	}
	t.Logf("tools/list: %d tools, %d tokens by default (chars/4); %d with two secrets; %d more with the toolsets off by default (%s)\n%s",
		len(rows), total, withSecrets, offByDefault, strings.Join(OffByDefault, ", "), b.String())
}
