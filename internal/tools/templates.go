package tools

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/sandboxer/sandboxer/internal/lang"
	"github.com/sandboxer/sandboxer/internal/sandbox"
	"github.com/sandboxer/sandboxer/internal/template"
	"github.com/sandboxer/sandboxer/internal/workspace"
)

// buildProgressKey carries, in a call's context, where a template's build
// output goes when the call builds it (a progress notification a line).
type buildProgressKey struct{}

// withBuildProgress makes a template built during this call report its
// build as progress notifications, when the client asked for them; stop
// ends them before the result is sent.
func (d Deps) withBuildProgress(ctx context.Context, req mcp.CallToolRequest) (context.Context, func()) {
	// Each step's header goes out; the lines between, a second apart.
	step := func(line string) bool { return strings.HasPrefix(line, "Step ") || strings.HasPrefix(line, "STEP ") }
	send, stop := d.lineProgress(ctx, req, step)
	if send == nil {
		return ctx, stop
	}
	return context.WithValue(ctx, buildProgressKey{}, send), stop
}

func buildProgressFrom(ctx context.Context) func(string) {
	if f, ok := ctx.Value(buildProgressKey{}).(func(string)); ok {
		return f
	}
	return nil
}

// resolveLanguage finds a language or a template (built now if it must be)
// and its image, or says what is wrong.
func (d Deps) resolveLanguage(ctx context.Context, name string) (lang.Language, string, *mcp.CallToolResult) {
	reg := d.Languages
	if reg == nil {
		reg = lang.NewRegistry(nil, nil)
	}
	l, image, err := reg.Resolve(ctx, name, buildProgressFrom(ctx))
	if err != nil {
		var unknown *lang.UnknownError
		var build *sandbox.BuildError
		switch {
		case errors.As(err, &unknown):
			return lang.Language{}, "", errorResult("%v", err)
		case errors.As(err, &build):
			return lang.Language{}, "", errorResult("language %q is a template whose build failed: %v", truncate(name, 64), err)
		}
		return lang.Language{}, "", errorResult("language %q: %v", truncate(name, 64), err)
	}
	return l, image, nil
}

// scriptLanguageNames are the languages and templates run_script runs.
func (d Deps) scriptLanguageNames() []string {
	names := lang.ScriptNames()
	for _, t := range d.Languages.TemplateNames() {
		if base, ok := d.Languages.TemplateLanguage(t); ok {
			if l, ok := lang.Builtin(base); ok && l.Script.File != "" {
				names = append(names, t)
			}
		}
	}
	return names
}

// ToolsetTemplates holds the tools that make templates. It is off unless
// named (--toolsets templates, or all): the default tool list stays within
// its token budget.
const ToolsetTemplates = "templates"

// OffByDefault are the toolsets on only when named: the default tool list
// keeps within its token budget (budget_test.go).
var OffByDefault = []string{ToolsetTemplates}

// SnapshotWorkspaceArgs are snapshot_workspace's arguments.
type SnapshotWorkspaceArgs struct {
	Workspace string `json:"workspace"`
	Template  string `json:"template"`
}

// TemplateResult is a template as snapshot_workspace made it.
type TemplateResult struct {
	Template string `json:"template" jsonschema:"give it as language"`
	Language string `json:"language" jsonschema:"runs as"`
	Image    string `json:"image"`
	Key      string `json:"key" jsonschema:"hash of its inputs"`
	SizeMB   int64  `json:"size_mb"`
}

func SnapshotWorkspace(d Deps) Tool {
	in := inputSchema[SnapshotWorkspaceArgs](map[string]param{
		"workspace": {desc: "workspace to snapshot"},
		"template":  {desc: "its name; replaces yours of that name"},
	})
	def := mcp.NewTool("snapshot_workspace",
		mcp.WithDescription("Template a workspace (its packages and /workspace files): fresh jobs and workspaces name it as language."),
		mcp.WithToolTitle("Snapshot a workspace"),
		annotations("Snapshot a workspace", false, false, false, false),
		withInput(in),
		withOutput[TemplateResult](),
	)
	return Tool{Toolset: ToolsetTemplates, Def: def, args: in, Handler: func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		var args SnapshotWorkspaceArgs
		if err := in.bind(req, &args); err != nil {
			return errorResult("%v", err), nil
		}
		if !d.Templates.Supported() {
			return errorResult("%s", d.lacks("templates")), nil
		}
		ws, problem := d.workspaces()
		if problem != nil {
			return problem, nil
		}
		if err := d.Templates.CheckName(args.Template); err != nil {
			return errorResult("template: %v", err), nil
		}
		w, problem := d.workspaceFor(ctx, args.Workspace, "")
		if problem != nil {
			return problem, nil
		}
		files := func(ctx context.Context) (io.ReadCloser, error) { return ws.Files(ctx, w) }
		ctx, stop := d.withBuildProgress(ctx, req)
		rec, err := d.Templates.Snapshot(ctx, template.SnapshotRequest{Name: args.Template, Workspace: w, Files: files,
			Env: workspace.CacheEnv, Progress: buildProgressFrom(ctx)})
		stop()
		if err != nil {
			return failure(err), nil
		}
		res := TemplateResult{Template: rec.Name, Language: rec.Language, Image: rec.Image, Key: rec.Key, SizeMB: (rec.SizeBytes + 1<<20 - 1) >> 20}
		return structured(res, fmt.Sprintf("template %s made from workspace %s (%s, %d MiB, key %s): give language %q to run_command, run_script or create_workspace",
			rec.Name, w.Name, rec.Language, res.SizeMB, rec.Key, rec.Name)), nil
	}}
}
