package mcpserver

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/sandboxer/sandboxer/internal/lang"
	"github.com/sandboxer/sandboxer/internal/policy"
	"github.com/sandboxer/sandboxer/internal/tools"
)

// TestArgumentErrorsAreToolResults sends tools/call messages through the MCP
// server: bad arguments come back as results with isError and a sentence
// naming the argument (not JSON-RPC errors, not schema-validator dumps), and
// a single value for a list reaches the tool (it is not refused by the
// server before the tool can take it as a list).
func TestArgumentErrorsAreToolResults(t *testing.T) {
	pol := policy.Default()
	s, err := New(tools.Deps{Policy: pol, Languages: lang.NewRegistry(pol.Image, nil)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		tool string
		args string
		want string
	}{
		{"run_command", `{"command":"echo","timeout_s":"x"}`, "argument timeout_s must be a number, not the string"},
		{"run_command", `{"command":"echo","bogus":1}`, `argument "bogus" is not known; known: command`},
		{"run_command", `{"language":"bash"}`, "argument command is required"},
		{"list_jobs", `{"limit":0}`, "limit 0 is out of range: 1 to 500"},
		// status is taken as a list: the only problem left is the limit.
		{"list_jobs", `{"status":"running","limit":0}`, "limit 0 is out of range: 1 to 500"},
		{"list_jobs", `{"status":"bogus"}`, `status "bogus" is not one of queued, running`},
		{"kill_job", `{"job_id":"123e4567-e89b-12d3-a456-426614174000","signal":"FOO"}`, `signal "FOO" is not one of TERM, INT`},
	}
	for i, tt := range tests {
		msg := `{"jsonrpc":"2.0","id":` + strconv.Itoa(i+1) + `,"method":"tools/call","params":{"name":"` + tt.tool + `","arguments":` + tt.args + `}}`
		resp := s.MCP().HandleMessage(context.Background(), json.RawMessage(msg))
		data, err := json.Marshal(resp)
		if err != nil {
			t.Fatal(err)
		}
		var out struct {
			Error  any `json:"error"`
			Result struct {
				IsError bool              `json:"isError"`
				Content []mcp.TextContent `json:"content"`
			} `json:"result"`
		}
		if err := json.Unmarshal(data, &out); err != nil {
			t.Fatalf("%s %s: %v: %s", tt.tool, tt.args, err, data)
		}
		if out.Error != nil || !out.Result.IsError || len(out.Result.Content) == 0 {
			t.Errorf("%s %s: want a tool result with isError, got %s", tt.tool, tt.args, data)
			continue
		}
		text := out.Result.Content[0].Text
		if !strings.Contains(text, tt.want) {
			t.Errorf("%s %s: %q does not contain %q", tt.tool, tt.args, text, tt.want)
		}
		if strings.Contains(text, "&{") || strings.Contains(text, "validation failed") {
			t.Errorf("%s %s: %q reads as a validator dump", tt.tool, tt.args, text)
		}
	}
}
