package tools

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/sandboxer/sandboxer/internal/audit"
	"github.com/sandboxer/sandboxer/internal/blocklist"

	"github.com/sandboxer/sandboxer/internal/tenant"
)

// ToolsetAdmin holds the tools that change what the server allows. Its tools
// are registered only when the operator allows agents to edit the block list.
const ToolsetAdmin = "admin"

// BlockedCommand is one entry of the block list.
type BlockedCommand struct {
	Command string `json:"command" jsonschema:"the command name; any path to it is caught too"`
	Source  string `json:"source" jsonschema:"policy (the operator's, cannot be removed by an agent) or agent (added with block_command)"`
	Reason  string `json:"reason,omitempty" jsonschema:"why it is blocked"`
	AddedBy string `json:"added_by,omitempty" jsonschema:"the MCP client that added it (agent entries)"`
	AddedAt string `json:"added_at,omitempty" jsonschema:"when it was added, RFC 3339 (agent entries)"`
}

// BlockListResult is the result of the block-list tools.
type BlockListResult struct {
	Commands   []BlockedCommand `json:"commands" jsonschema:"the block list in force, by command name"`
	AgentEdits bool             `json:"agent_edits" jsonschema:"whether agents may add and remove their own entries"`
	Changed    bool             `json:"changed" jsonschema:"whether this call changed the list"`
}

// ListBlockedArgs takes nothing.
type ListBlockedArgs struct{}

// BlockCommandArgs are block_command's arguments.
type BlockCommandArgs struct {
	Command string `json:"command" jsonschema:"command name, e.g. curl"`
	Reason  string `json:"reason,omitempty" jsonschema:"why (shown in refusals)"`
}

// UnblockCommandArgs are unblock_command's arguments.
type UnblockCommandArgs struct {
	Command string `json:"command" jsonschema:"a command an agent blocked"`
}

const blockListNote = "The block list is checked on the parsed shell of every command (also in $(...), pipelines, sh -c strings, eval, after env/sudo/xargs/find -exec, through paths and quoting); " +
	"it is advisory: code run by another interpreter, decoded at run time or named by a variable gets past it, and the container stays the boundary."

func (d Deps) blockListResult(ctx context.Context, changed bool) BlockListResult {
	res := BlockListResult{Commands: []BlockedCommand{}, AgentEdits: d.Blocklist.EditsAllowed(), Changed: changed}
	for _, e := range d.Blocklist.Entries(ctx) {
		bc := BlockedCommand{Command: e.Command, Source: e.Source, Reason: e.Reason, AddedBy: e.AddedBy}
		if !e.AddedAt.IsZero() {
			bc.AddedAt = e.AddedAt.UTC().Format(time.RFC3339)
		}
		res.Commands = append(res.Commands, bc)
	}
	return res
}

func blockListText(res BlockListResult, head string) string {
	names := make([]string, 0, len(res.Commands))
	for _, c := range res.Commands {
		names = append(names, c.Command+" ("+c.Source+")")
	}
	list := "empty"
	if len(names) > 0 {
		list = strings.Join(names, ", ")
	}
	return fmt.Sprintf("%sblock list: %s; agent edits %s", head, list, map[bool]string{true: "allowed", false: "off"}[res.AgentEdits])
}

func ListBlockedCommands(d Deps) Tool {
	in := inputSchema[ListBlockedArgs](nil)
	def := mcp.NewTool("list_blocked_commands",
		mcp.WithDescription("Blocked commands, their reasons, and whether agents may edit them."),
		mcp.WithToolTitle("List blocked commands"),
		annotations("List blocked commands", true, false, true, false),
		withInput(in),
		withOutput[BlockListResult](),
	)
	return Tool{Toolset: ToolsetInfo, Def: def, args: in, Handler: func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		var args ListBlockedArgs
		if err := in.bind(req, &args); err != nil {
			return errorResult("%v", err), nil
		}
		res := d.blockListResult(ctx, false)
		return structured(res, blockListText(res, "")), nil
	}}
}

func BlockCommand(d Deps) Tool {
	in := inputSchema[BlockCommandArgs](nil)
	def := mcp.NewTool("block_command",
		mcp.WithDescription("Block a command on every entry point (where the operator lets agents)."),
		mcp.WithToolTitle("Block a command"),
		annotations("Block a command", false, false, true, false),
		withInput(in),
		withOutput[BlockListResult](),
	)
	return Tool{Toolset: ToolsetAdmin, Def: def, args: in, Handler: func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		var args BlockCommandArgs
		if err := in.bind(req, &args); err != nil {
			return errorResult("%v", err), nil
		}
		isNew, err := d.Blocklist.Block(ctx, args.Command, args.Reason, ClientName(ctx))
		if err != nil {
			return blockFailure(err), nil
		}
		res := d.blockListResult(ctx, true)
		head := fmt.Sprintf("blocked %s; ", args.Command)
		if !isNew {
			head = fmt.Sprintf("%s was already blocked (reason updated); ", args.Command)
		}
		return structured(res, blockListText(res, head)), nil
	}}
}

func UnblockCommand(d Deps) Tool {
	in := inputSchema[UnblockCommandArgs](nil)
	def := mcp.NewTool("unblock_command",
		mcp.WithDescription("Unblock a command an agent blocked."),
		mcp.WithToolTitle("Unblock a command"),
		annotations("Unblock a command", false, true, true, false),
		withInput(in),
		withOutput[BlockListResult](),
	)
	return Tool{Toolset: ToolsetAdmin, Def: def, args: in, Handler: func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		var args UnblockCommandArgs
		if err := in.bind(req, &args); err != nil {
			return errorResult("%v", err), nil
		}
		if err := d.Blocklist.Unblock(ctx, args.Command); err != nil {
			return blockFailure(err), nil
		}
		res := d.blockListResult(ctx, true)
		return structured(res, blockListText(res, fmt.Sprintf("unblocked %s; ", args.Command))), nil
	}}
}

func blockFailure(err error) *mcp.CallToolResult {
	switch {
	case errors.Is(err, blocklist.ErrEditsOff):
		return errorResult("refused: %v", err)
	case errors.Is(err, blocklist.ErrBadName), errors.Is(err, blocklist.ErrBadReason),
		errors.Is(err, blocklist.ErrPolicyEntry), errors.Is(err, blocklist.ErrNotBlocked), errors.Is(err, blocklist.ErrAdminEntry):
		return errorResult("%s", truncate(err.Error(), 400))
	}
	return failure(err)
}

// checkBlocked applies the block list to a shell script about to run: nil when
// it may run, else the tool error naming the rule (or why it could not be
// checked). Every entry point that runs shell calls it.
func (d Deps) checkBlocked(ctx context.Context, script string, stdin *string, what string) *mcp.CallToolResult {
	var dec blocklist.Decision
	var err error
	if stdin != nil {
		dec, err = d.Blocklist.CheckStdin(ctx, script, *stdin)
	} else {
		dec, err = d.Blocklist.Check(ctx, script)
	}
	if err != nil {
		audit.NoteBlocked(ctx, "unparseable")
		return errorResult("%s refused: %s", what, truncate(err.Error(), 600))
	}
	if !dec.Allowed {
		audit.NoteBlocked(ctx, dec.Rule.Command+" ("+dec.Rule.Source+")")
		return errorResult("%s refused: %s. The block list is the operator's (list_blocked_commands shows it).", what, truncate(dec.Message(), 600))
	}
	return nil
}

// checkInput applies the block list to text typed into a job (send_input):
// text that parses as shell and runs a blocked command is refused. Text that
// does not parse is let through, since input is often data for a program that
// is no shell; an interactive shell fed a command piece by piece cannot be
// checked reliably by any parser (README).
func (d Deps) checkInput(ctx context.Context, text string) *mcp.CallToolResult {
	if text == "" {
		return nil
	}
	dec, err := d.Blocklist.Check(ctx, text)
	if err != nil || dec.Allowed {
		return nil
	}
	audit.NoteBlocked(ctx, dec.Rule.Command+" ("+dec.Rule.Source+")")
	return errorResult("input refused: %s. The block list is the operator's (list_blocked_commands shows it).", truncate(dec.Message(), 600))
}

// ClientName is "name version" of the MCP client of ctx's session, from its
// initialize request (or its per-request info in the stateless revision).
func ClientName(ctx context.Context) string {
	name := ""
	if t, ok := tenant.From(ctx); ok && t.Name != tenant.Local {
		name = t.Name + ":" // a token's tenant first: who it was, not what it says it is
	}
	s := server.ClientSessionFromContext(ctx)
	if s == nil {
		return strings.TrimSuffix(name, ":")
	}
	ci, ok := s.(server.SessionWithClientInfo)
	if !ok {
		return strings.TrimSuffix(name, ":")
	}
	info := ci.GetClientInfo()
	return strings.TrimSpace(name + " " + truncate(info.Name, 100) + " " + truncate(info.Version, 50))
}
