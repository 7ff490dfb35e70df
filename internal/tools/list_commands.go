package tools

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/sandboxer/sandboxer/internal/lang"
	"github.com/sandboxer/sandboxer/internal/sandbox"
	"github.com/sandboxer/sandboxer/internal/workspace"
)

const (
	maxListedCommands = 1000 // command names returned
	maxListedPackages = 300  // package names returned per manager
	listCommandsTime  = 30 * time.Second
)

// listCommandsProbe prints sections: commands on PATH, tool versions, and
// the packages of each manager ("name version" lines), each with its count.
var listCommandsProbe = fmt.Sprintf(`export LC_ALL=C
a=${SANDBOXER_APT_DIR:-}
[ -n "$a" ] && [ -d "$a/root" ] || a=
[ -n "$a" ] && PATH=$PATH:$a/root/usr/local/bin:$a/root/usr/bin:$a/root/bin:$a/root/usr/sbin:$a/root/sbin
cmds=$(IFS=:; for d in $PATH; do [ -d "$d" ] && ls -1 "$d" 2>/dev/null; done | sort -u)
echo "@@count commands $(printf '%%s\n' "$cmds" | grep -c .)"
echo "@@section commands"; printf '%%s\n' "$cmds" | head -n %[1]d
echo "@@section versions"
v() { command -v "$1" >/dev/null 2>&1 && printf '%%s\t%%s\n' "$1" "$("$@" 2>&1 | head -n1)"; }
v bash --version; v python3 --version; v pip3 --version; v node --version; v npm --version; v tsc --version
v go version; v rustc --version; v cargo --version; v gcc --version; v make --version; v git --version; v solc --version
pk() { echo "@@count $1 $(printf '%%s\n' "$2" | grep -c .)"; echo "@@section $1"; printf '%%s\n' "$2" | head -n %[2]d; }
`+workspace.AptUnpackedList+`command -v dpkg-query >/dev/null && pk apt "$({ dpkg-query -W -f='${db:Status-Status} ${binary:Package} ${Version}\n' 2>/dev/null | awk '$1=="installed"{print $2" "$3}'; unpacked; } | sort -u)"
command -v python3 >/dev/null && pk pip "$(python3 -m pip list --format=freeze 2>/dev/null | sed 's/==/ /')"
command -v npm >/dev/null && pk npm-global "$(npm ls -g --depth=0 --parseable 2>/dev/null | tail -n +2 | sed 's|.*/node_modules/||')"
[ -d /workspace/node_modules ] && pk npm "$(cd /workspace && npm ls --depth=0 --parseable 2>/dev/null | tail -n +2 | sed 's|.*/node_modules/||')"
command -v cargo >/dev/null && pk cargo "$(cargo install --list 2>/dev/null | awk '/^[^ ]/{sub(/:$/,"",$2); print $1" "$2}')"
true
`, maxListedCommands, maxListedPackages)

// ListCommandsArgs are list_commands' arguments.
type ListCommandsArgs struct {
	Language  string `json:"language,omitempty"`
	Workspace string `json:"workspace,omitempty"`
}

// PackageList is one manager's installed packages.
type PackageList struct {
	Manager   string   `json:"manager" jsonschema:"apt, pip, npm (in /workspace), npm-global or cargo"`
	Count     int      `json:"count" jsonschema:"how many packages are installed"`
	Packages  []string `json:"packages" jsonschema:"\"name version\" of each, at most 300"`
	Truncated bool     `json:"truncated" jsonschema:"more are installed than listed"`
}

// ListCommandsResult is list_commands' result.
type ListCommandsResult struct {
	Language          string            `json:"language,omitempty" jsonschema:"the language whose image was looked at"`
	Workspace         string            `json:"workspace,omitempty" jsonschema:"the workspace looked at"`
	Commands          []string          `json:"commands" jsonschema:"executables on PATH, by name, at most 1000"`
	CommandCount      int               `json:"command_count" jsonschema:"how many executables are on PATH"`
	CommandsTruncated bool              `json:"commands_truncated" jsonschema:"more commands exist than listed"`
	Versions          map[string]string `json:"versions" jsonschema:"the first line of each known tool's version"`
	Packages          []PackageList     `json:"packages" jsonschema:"installed packages per manager"`
}

func ListCommands(d Deps) Tool {
	in := inputSchema[ListCommandsArgs](map[string]param{
		"language": oneOf(d.languageNames()...).checkedByHandler().describe(
			"image to look at; default %s", lang.DefaultLanguage),
		"workspace": {desc: "look in this workspace instead"},
	})
	def := mcp.NewTool("list_commands",
		mcp.WithDescription("What an image or a workspace offers: commands, tool versions, installed packages."),
		mcp.WithToolTitle("List commands and packages"),
		annotations("List commands and packages", true, false, true, false),
		withInput(in),
		withOutput[ListCommandsResult](),
	)
	return Tool{Toolset: ToolsetInfo, Def: def, args: in, Handler: func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		var args ListCommandsArgs
		if err := in.bind(req, &args); err != nil {
			return errorResult("%v", err), nil
		}
		ctx, cancel := context.WithTimeout(ctx, listCommandsTime)
		defer cancel()
		var out string
		res := ListCommandsResult{}
		if args.Workspace != "" {
			if _, problem := d.workspaceFor(ctx, args.Workspace, args.Language); problem != nil {
				return problem, nil
			}
			ws, _ := d.workspaces()
			buf := &cappedBuffer{max: 256 << 10}
			if _, err := ws.Exec(ctx, args.Workspace, sandbox.ExecOptions{Cmd: []string{"bash", "-c", listCommandsProbe}, Stdout: buf}); err != nil {
				return workspaceFailure(err), nil
			}
			out = buf.b.String()
			res.Workspace = args.Workspace
		} else {
			name := args.Language
			if name == "" {
				name = lang.DefaultLanguage
			}
			ctx, stop := d.withBuildProgress(ctx, req)
			language, image, problem := d.resolveLanguage(ctx, name)
			stop()
			if problem != nil {
				return problem, nil
			}
			if problem := d.checkImage(ctx, image); problem != nil {
				return problem, nil
			}
			var err error
			if out, err = d.Jobs.Probe(ctx, image, listCommandsProbe, listCommandsTime); err != nil {
				return failure(err), nil
			}
			res.Language = language.Name
		}
		parseListCommands(out, &res)
		var b strings.Builder
		fmt.Fprintf(&b, "%d commands on PATH", res.CommandCount)
		keys := make([]string, 0, len(res.Versions))
		for k := range res.Versions {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			fmt.Fprintf(&b, "\n%s: %s", k, res.Versions[k])
		}
		for _, p := range res.Packages {
			fmt.Fprintf(&b, "\n%s: %d packages", p.Manager, p.Count)
		}
		return structured(res, b.String()), nil
	}}
}

func parseListCommands(out string, res *ListCommandsResult) {
	res.Commands, res.Versions, res.Packages = []string{}, map[string]string{}, []PackageList{}
	counts := map[string]int{}
	section := ""
	byManager := map[string]*PackageList{}
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) == 3 && f[0] == "@@count" {
			counts[f[1]], _ = strconv.Atoi(f[2])
			continue
		}
		if rest, ok := strings.CutPrefix(line, "@@section "); ok {
			section = strings.TrimSpace(rest)
			if section != "commands" && section != "versions" {
				res.Packages = append(res.Packages, PackageList{Manager: section, Packages: []string{}})
				byManager[section] = &res.Packages[len(res.Packages)-1]
			}
			continue
		}
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		switch section {
		case "commands":
			res.Commands = append(res.Commands, line)
		case "versions":
			if k, v, ok := strings.Cut(line, "\t"); ok {
				res.Versions[k] = truncate(strings.TrimSpace(v), 200)
			}
		case "":
		default:
			if p := byManager[section]; p != nil {
				p.Packages = append(p.Packages, truncate(line, 200))
			}
		}
	}
	res.CommandCount = max(counts["commands"], len(res.Commands))
	res.CommandsTruncated = res.CommandCount > len(res.Commands)
	for i := range res.Packages {
		p := &res.Packages[i]
		p.Count = max(counts[p.Manager], len(p.Packages))
		p.Truncated = p.Count > len(p.Packages)
	}
}

// cappedBuffer keeps the first max bytes written to it.
type cappedBuffer struct {
	b   strings.Builder
	max int
}

func (c *cappedBuffer) Write(p []byte) (int, error) {
	if room := c.max - c.b.Len(); room > 0 {
		c.b.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}
