package tools

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"path"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/sandboxer/sandboxer/internal/supervisor/proto"
	"github.com/sandboxer/sandboxer/internal/workspace"
)

// write_file, read_file and list_files: a workspace's files, reached through
// the supervisor's fs helper inside the workspace's container (never on the
// host). Paths are relative to /workspace or absolute under it; a symbolic
// link anywhere in a path is refused.

const (
	defaultFileReadBytes = 256 << 10
	defaultListEntries   = 1000
	maxGlobBytes         = 256
	filePathDesc         = "file path under /workspace"
)

// Encodings of file content.
const (
	encodingText   = "text"
	encodingBase64 = "base64"
)

// fileFailure turns a file operation's error into a tool error naming path.
func fileFailure(rel string, err error) *mcp.CallToolResult {
	var fe *workspace.FileError
	if errors.As(err, &fe) {
		msg := fe.Msg
		switch fe.Kind {
		case "symlink":
			return errorResult("path %q: a symbolic link is in the path; file tools never follow symbolic links (read or change links with run_command)", rel)
		case "not_found":
			return errorResult("path %q: no such file or directory in the workspace (list_files shows what is there)", rel)
		case "escape":
			return errorResult("path %q leaves /workspace", rel)
		}
		return errorResult("path %q: %s", rel, msg)
	}
	return workspaceFailure(err)
}

// WriteFileArgs are write_file's arguments.
type WriteFileArgs struct {
	Workspace string `json:"workspace"`
	Path      string `json:"path"`
	Content   string `json:"content" jsonschema:"the content: text, or base64 when encoding is base64"`
	Encoding  string `json:"encoding,omitempty"`
	Mode      string `json:"mode,omitempty" jsonschema:"octal mode, e.g. 0755; default: kept, or 0644"`
	Append    bool   `json:"append,omitempty" jsonschema:"append instead of replacing"`
}

// WriteFileResult is write_file's result.
type WriteFileResult struct {
	Workspace string `json:"workspace" jsonschema:"the workspace"`
	Path      string `json:"path" jsonschema:"the file's path under /workspace"`
	Written   int64  `json:"bytes_written" jsonschema:"bytes written"`
	Size      int64  `json:"size" jsonschema:"the file's size afterwards"`
	Mode      string `json:"mode" jsonschema:"the file's permission bits (octal)"`
}

func WriteFile(d Deps) Tool {
	in := inputSchema[WriteFileArgs](map[string]param{
		"workspace": {desc: workspaceNameDesc},
		"path":      {desc: filePathDesc},
		"encoding":  oneOf(encodingText, encodingBase64).describe("default text"),
		"content":   {desc: fmt.Sprintf("text, or base64 (≤ %d bytes decoded)", workspace.MaxWriteBytes)},
	})
	def := mcp.NewTool("write_file",
		mcp.WithDescription("Write or append a workspace file, making missing directories."),
		mcp.WithToolTitle("Write a file"),
		annotations("Write a file", false, true, false, false),
		withInput(in),
		withOutput[WriteFileResult](),
	)
	return Tool{Toolset: ToolsetWorkspaces, Def: def, args: in, Handler: func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		var args WriteFileArgs
		if err := in.bind(req, &args); err != nil {
			return errorResult("%v", err), nil
		}
		ws, rel, problem := d.workspaceFile(args.Workspace, args.Path)
		if problem != nil {
			return problem, nil
		}
		if rel == "." {
			return errorResult("path %q is /workspace itself: name a file in it", args.Path), nil
		}
		var content []byte
		switch args.Encoding {
		case "", encodingText:
			content = []byte(args.Content)
		case encodingBase64:
			var err error
			content, err = base64.StdEncoding.DecodeString(args.Content)
			if err != nil {
				return errorResult("content is not valid base64 (standard alphabet, with padding): %v", err), nil
			}
		}
		if len(content) > workspace.MaxWriteBytes {
			return errorResult("content is %d bytes; write_file takes at most %d per call (append the rest with append: true)", len(content), workspace.MaxWriteBytes), nil
		}
		mode := int64(-1)
		if args.Mode != "" {
			m, err := strconv.ParseUint(args.Mode, 8, 32)
			if err != nil || m > 0o777 || len(args.Mode) > 5 {
				return errorResult("mode %q is not an octal permission string such as \"0644\" or \"0755\" (at most 0777)", truncate(args.Mode, 16)), nil
			}
			mode = int64(m)
		}
		res, err := ws.WriteFile(ctx, args.Workspace, rel, content, mode, args.Append)
		if err != nil {
			return fileFailure(rel, err), nil
		}
		out := WriteFileResult{Workspace: args.Workspace, Path: path.Join(workspace.Root, rel), Written: res.Written, Size: res.Size, Mode: res.Mode}
		return structured(out, fmt.Sprintf("wrote %d bytes to %s (size %d, mode %s)", out.Written, out.Path, out.Size, out.Mode)), nil
	}}
}

// ReadFileArgs are read_file's arguments.
type ReadFileArgs struct {
	Workspace  string `json:"workspace"`
	Path       string `json:"path"`
	OffsetLine int    `json:"offset_line,omitempty"`
	LimitLines int    `json:"limit_lines,omitempty"`
	MaxBytes   int    `json:"max_bytes,omitempty"`
}

// ReadFileResult is read_file's result.
type ReadFileResult struct {
	Workspace string `json:"workspace" jsonschema:"the workspace"`
	Path      string `json:"path" jsonschema:"the file's path under /workspace"`
	Content   string `json:"content" jsonschema:"the content read: text, or base64 when encoding is base64"`
	Encoding  string `json:"encoding" jsonschema:"text (UTF-8) or base64 (the bytes are not UTF-8 text)"`
	Size      int64  `json:"size" jsonschema:"the whole file's size in bytes"`
	Bytes     int    `json:"bytes" jsonschema:"bytes of the file returned"`
	Truncated bool   `json:"truncated" jsonschema:"the content was cut at max_bytes"`
	FirstLine int    `json:"first_line,omitempty" jsonschema:"with a line range: the first line returned (1-based)"`
	Lines     int    `json:"lines,omitempty" jsonschema:"with a line range: how many lines were returned"`
	MoreLines bool   `json:"more_lines,omitempty" jsonschema:"with a line range: lines follow the ones returned"`
}

func ReadFile(d Deps) Tool {
	in := inputSchema[ReadFileArgs](map[string]param{
		"workspace":   {desc: workspaceNameDesc},
		"path":        {desc: filePathDesc},
		"offset_line": between(1, 1e9).describe("first line (1-based)"),
		"limit_lines": between(1, 1e9).describe("most lines"),
		"max_bytes": between(1, workspace.MaxReadBytes).describe(
			"default %d", defaultFileReadBytes),
	})
	def := mcp.NewTool("read_file",
		mcp.WithDescription("Read a workspace file, whole or by lines; non-UTF-8 comes back as base64."),
		mcp.WithToolTitle("Read a file"),
		annotations("Read a file", true, false, true, false),
		withInput(in),
		withOutput[ReadFileResult](),
	)
	return Tool{Toolset: ToolsetWorkspaces, Def: def, args: in, Handler: func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		var args ReadFileArgs
		if err := in.bind(req, &args); err != nil {
			return errorResult("%v", err), nil
		}
		ws, rel, problem := d.workspaceFile(args.Workspace, args.Path)
		if problem != nil {
			return problem, nil
		}
		max := args.MaxBytes
		if max == 0 {
			max = defaultFileReadBytes
		}
		res, err := ws.ReadFile(ctx, args.Workspace, rel, args.OffsetLine, args.LimitLines, int64(max))
		if err != nil {
			return fileFailure(rel, err), nil
		}
		out := ReadFileResult{Workspace: args.Workspace, Path: path.Join(workspace.Root, rel), Size: res.Size,
			Bytes: len(res.Content), Truncated: res.Truncated, FirstLine: res.FirstLine, Lines: res.Lines, MoreLines: res.MoreLines}
		out.Content, out.Encoding = encodeContent(res.Content, res.Truncated)
		text := fmt.Sprintf("%s: %d of %d bytes", out.Path, out.Bytes, out.Size)
		if out.Truncated {
			text += " (cut at max_bytes)"
		}
		if out.Encoding == encodingBase64 {
			text += ", base64:\n" + out.Content
		} else {
			text += ":\n" + out.Content
		}
		return structured(out, text), nil
	}}
}

// encodeContent returns text when b is UTF-8 without NUL bytes (a rune cut
// by truncation at the end is dropped), base64 otherwise.
func encodeContent(b []byte, truncated bool) (string, string) {
	t := b
	if truncated {
		for i := 0; i < utf8.UTFMax-1 && len(t) > 0 && !utf8.Valid(t); i++ {
			t = t[:len(t)-1]
		}
	}
	if utf8.Valid(t) && !strings.ContainsRune(string(t), 0) {
		return string(t), encodingText
	}
	return base64.StdEncoding.EncodeToString(b), encodingBase64
}

// ListFilesArgs are list_files' arguments.
type ListFilesArgs struct {
	Workspace  string `json:"workspace"`
	Path       string `json:"path,omitempty"`
	Recursive  bool   `json:"recursive,omitempty" jsonschema:"descend into subdirectories"`
	Glob       string `json:"glob,omitempty"`
	MaxEntries int    `json:"max_entries,omitempty"`
}

// FileEntry is one entry of list_files.
type FileEntry struct {
	Path   string `json:"path" jsonschema:"path relative to /workspace"`
	Name   string `json:"name" jsonschema:"the entry's name"`
	Type   string `json:"type" jsonschema:"file, dir, symlink or other"`
	Size   int64  `json:"size" jsonschema:"size in bytes"`
	Mode   string `json:"mode" jsonschema:"permission bits (octal)"`
	MTime  string `json:"mtime" jsonschema:"last modification (RFC 3339, UTC)"`
	Target string `json:"target,omitempty" jsonschema:"a symbolic link's target (not followed)"`
}

// ListFilesResult is list_files' result.
type ListFilesResult struct {
	Workspace string      `json:"workspace" jsonschema:"the workspace"`
	Path      string      `json:"path" jsonschema:"the directory listed, under /workspace"`
	Entries   []FileEntry `json:"entries" jsonschema:"the entries, directory by directory, by name"`
	Truncated bool        `json:"truncated" jsonschema:"more entries exist past max_entries"`
}

func ListFiles(d Deps) Tool {
	in := inputSchema[ListFilesArgs](map[string]param{
		"workspace": {desc: workspaceNameDesc},
		"path":      {desc: "directory under /workspace; default /workspace"},
		"glob":      {desc: "name pattern, e.g. *.py"},
		"max_entries": between(1, workspace.MaxListEntries).describe(
			"default %d", defaultListEntries),
	})
	def := mcp.NewTool("list_files",
		mcp.WithDescription("List a workspace directory (links shown, never followed)."),
		mcp.WithToolTitle("List files"),
		annotations("List files", true, false, true, false),
		withInput(in),
		withOutput[ListFilesResult](),
	)
	return Tool{Toolset: ToolsetWorkspaces, Def: def, args: in, Handler: func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		var args ListFilesArgs
		if err := in.bind(req, &args); err != nil {
			return errorResult("%v", err), nil
		}
		p := args.Path
		if p == "" {
			p = "."
		}
		ws, rel, problem := d.workspaceFile(args.Workspace, p)
		if problem != nil {
			return problem, nil
		}
		if err := checkText("glob", args.Glob, maxGlobBytes); err != nil {
			return errorResult("%v", err), nil
		}
		if _, err := path.Match(args.Glob, ""); err != nil || strings.Contains(args.Glob, "/") || args.Glob == "-" {
			return errorResult("glob %q is not a valid pattern of names (*, ?, [...]; no '/')", truncate(args.Glob, 64)), nil
		}
		max := args.MaxEntries
		if max == 0 {
			max = defaultListEntries
		}
		res, err := ws.ListFiles(ctx, args.Workspace, rel, args.Recursive, args.Glob, max)
		if err != nil {
			return fileFailure(rel, err), nil
		}
		out := ListFilesResult{Workspace: args.Workspace, Path: path.Join(workspace.Root, rel), Entries: []FileEntry{}, Truncated: res.Truncated}
		var b strings.Builder
		fmt.Fprintf(&b, "%d entries under %s", len(res.Entries), out.Path)
		if res.Truncated {
			b.WriteString(" (more past max_entries)")
		}
		for _, e := range res.Entries {
			out.Entries = append(out.Entries, fileEntry(e))
			fmt.Fprintf(&b, "\n%s %s %d %s", e.Type, e.Mode, e.Size, e.Path)
			if e.Target != "" {
				b.WriteString(" -> " + e.Target)
			}
		}
		return structured(out, b.String()), nil
	}}
}

func fileEntry(e proto.FSEntry) FileEntry {
	return FileEntry{Path: e.Path, Name: e.Name, Type: e.Type, Size: e.Size, Mode: e.Mode, MTime: e.MTime, Target: e.Target}
}

// workspaceFile checks what every file tool is given — workspaces on, a
// workspace name, a path inside /workspace — before any engine call, and
// returns the manager and the path relative to /workspace.
func (d Deps) workspaceFile(name, p string) (*workspace.Manager, string, *mcp.CallToolResult) {
	ws, problem := d.workspaces()
	if problem != nil {
		return nil, "", problem
	}
	if err := workspace.CheckRef(name); err != nil {
		return nil, "", errorResult("workspace: %v", err)
	}
	rel, err := workspace.CleanPath("path", p)
	if err != nil {
		return nil, "", errorResult("%v", err)
	}
	return ws, rel, nil
}
