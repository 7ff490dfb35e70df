package tools

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/sandboxer/sandboxer/internal/audit"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/sandboxer/sandboxer/internal/workspace"
)

const defaultInstallTimeoutS = 600

// InstallPackagesArgs are install_packages' arguments.
type InstallPackagesArgs struct {
	Workspace string              `json:"workspace"`
	Packages  []string            `json:"packages,omitempty"`
	Manager   string              `json:"manager,omitempty"`
	ByManager map[string][]string `json:"by_manager,omitempty"`
	TimeoutS  *float64            `json:"timeout_s,omitempty"`
}

// InstalledPackage is one package's outcome.
type InstalledPackage struct {
	Manager   string   `json:"manager" jsonschema:"the package manager that installed it"`
	Package   string   `json:"package" jsonschema:"the package as asked for"`
	Name      string   `json:"name" jsonschema:"its name, without a version"`
	Installed bool     `json:"installed" jsonschema:"it is installed now"`
	Version   string   `json:"version,omitempty" jsonschema:"the version installed"`
	Log       []string `json:"log,omitempty" jsonschema:"the last lines of the manager's output that name it"`
}

// ManagerRun is one package manager's run.
type ManagerRun struct {
	Manager  string   `json:"manager" jsonschema:"the package manager"`
	ExitCode int      `json:"exit_code" jsonschema:"the installer's exit code (-1: it did not end by itself)"`
	Error    string   `json:"error,omitempty" jsonschema:"why the installer failed"`
	LogTail  []string `json:"log_tail" jsonschema:"the last lines of its output"`
}

// InstallPackagesResult is install_packages' result.
type InstallPackagesResult struct {
	Workspace string             `json:"workspace" jsonschema:"the workspace"`
	Installed bool               `json:"installed" jsonschema:"every package asked for is installed"`
	Packages  []InstalledPackage `json:"packages" jsonschema:"each package's outcome"`
	Managers  []ManagerRun       `json:"managers" jsonschema:"each package manager's run, in order"`
}

func InstallPackages(d Deps) Tool {
	pol := d.policyOrDefault()
	maxTimeout := float64(pol.Limits.TimeoutS.Max)
	managers := append([]string{workspace.ManagerAuto}, workspace.Managers...)
	in := inputSchema[InstallPackagesArgs](map[string]param{
		"workspace":  {desc: workspaceNameDesc},
		"packages":   {desc: "packages, versioned as the manager writes it (jq=1.6-2, x@^2, x==2.31)"},
		"manager":    oneOf(managers...).describe("manager of packages; default auto (the workspace language's)"),
		"by_manager": {desc: "manager to packages, instead of packages and manager"},
		"timeout_s":  between(1, maxTimeout).describe("seconds for the whole install; default %d", min(defaultInstallTimeoutS, int(maxTimeout))),
	})
	def := mcp.NewTool("install_packages",
		mcp.WithDescription("Install packages into a workspace with apt, pip, npm, go or cargo, on a network its jobs never see."),
		mcp.WithToolTitle("Install packages"),
		annotations("Install packages", false, false, true, true),
		mcp.WithTaskSupport(mcp.TaskSupportOptional),
		withInput(in),
		withOutput[InstallPackagesResult](),
	)
	return Tool{Toolset: ToolsetWorkspaces, Def: def, args: in, Handler: func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		var args InstallPackagesArgs
		if err := in.bind(req, &args); err != nil {
			return errorResult("%v", err), nil
		}
		w, problem := d.workspaceFor(ctx, args.Workspace, "")
		if problem != nil {
			return problem, nil
		}
		ws, _ := d.workspaces()
		by := map[string][]string{}
		switch {
		case len(args.ByManager) > 0 && (len(args.Packages) > 0 || args.Manager != ""):
			return errorResult("give packages (with manager) or by_manager, not both"), nil
		case len(args.ByManager) > 0:
			for mgr, list := range args.ByManager {
				if mgr == workspace.ManagerAuto {
					mgr = workspace.AutoManager(w.Language)
				}
				if _, known := workspace.PackageManagerKnown(mgr); !known {
					return errorResult("by_manager: unknown package manager %q: use %s", truncate(mgr, 32), strings.Join(workspace.Managers, ", ")), nil
				}
				by[mgr] = append(by[mgr], list...)
			}
		case len(args.Packages) > 0:
			mgr := args.Manager
			if mgr == "" || mgr == workspace.ManagerAuto {
				mgr = workspace.AutoManager(w.Language)
			}
			by[mgr] = args.Packages
		default:
			return errorResult("packages is empty: name the packages to install (or give by_manager)"), nil
		}
		n := 0
		for mgr, list := range by {
			for _, p := range list {
				n++
				if err := workspace.CheckPackage(mgr, p); err != nil {
					field := "packages"
					if len(args.ByManager) > 0 {
						field = "by_manager." + mgr
					}
					return errorResult("%s: %v; nothing was installed", field, err), nil
				}
			}
		}
		if n == 0 {
			return errorResult("by_manager lists no package: name the packages to install"), nil
		}
		// The block list holds for installs too: the install, as the shell
		// line it amounts to, must not name a blocked command.
		for mgr, list := range by {
			if problem := d.checkBlocked(ctx, installLine(mgr, list), nil, "install"); problem != nil {
				return problem, nil
			}
		}
		if n > workspace.MaxPackages {
			return errorResult("%d packages asked for; install_packages takes at most %d per call", n, workspace.MaxPackages), nil
		}
		timeout := float64(min(defaultInstallTimeoutS, int(maxTimeout)))
		if args.TimeoutS != nil {
			timeout = *args.TimeoutS
		}
		if timeout <= 0 || timeout > maxTimeout {
			return errorResult("timeout_s must be between 1 and %s (policy limits.timeout_s.max), got %s", num(maxTimeout), num(timeout)), nil
		}
		progress, stop := d.installProgress(ctx, req)
		results, err := ws.Install(ctx, workspace.InstallRequest{Workspace: args.Workspace, ByManager: by,
			Timeout: time.Duration(timeout * float64(time.Second)), Progress: progress})
		stop()
		if err != nil {
			return workspaceFailure(err), nil
		}
		audit.NoteRan(ctx) // its managers ran: a package not installed is a failure, not a refusal
		out := InstallPackagesResult{Workspace: args.Workspace, Installed: true, Packages: []InstalledPackage{}, Managers: []ManagerRun{}}
		var b strings.Builder
		for _, r := range results {
			out.Managers = append(out.Managers, ManagerRun{Manager: r.Manager, ExitCode: r.ExitCode, Error: r.Error, LogTail: append([]string{}, r.LogTail...)})
			for _, p := range r.Packages {
				out.Packages = append(out.Packages, InstalledPackage{Manager: p.Manager, Package: p.Spec, Name: p.Name,
					Installed: p.Installed, Version: p.Version, Log: p.Log})
				out.Installed = out.Installed && p.Installed
				state := "installed " + p.Version
				if !p.Installed {
					state = "NOT installed"
				}
				fmt.Fprintf(&b, "%s %s: %s\n", p.Manager, p.Spec, strings.TrimSpace(state))
			}
			if r.Error != "" {
				fmt.Fprintf(&b, "%s failed: %s\n%s\n", r.Manager, r.Error, strings.Join(r.LogTail, "\n"))
			}
		}
		res := structured(out, strings.TrimSpace(b.String()))
		if !out.Installed {
			// An agent that checks isError must not go on as if the packages
			// were there; the structured result still lists every package
			// and each manager's log tail.
			res.IsError = true
			res.Content = []mcp.Content{mcp.NewTextContent("not every package was installed:\n" + strings.TrimSpace(b.String()))}
		}
		return res, nil
	}}
}

// installProgress sends throttled progress notifications with the
// installers' latest output line, when the client asked for them.
func (d Deps) installProgress(ctx context.Context, req mcp.CallToolRequest) (func(manager, line string), func()) {
	send, stop := d.lineProgress(ctx, req, nil)
	if send == nil {
		return nil, stop
	}
	return func(manager, line string) { send(manager + ": " + line) }, stop
}

// lineProgress sends lines of a call's work as progress notifications, a
// second apart (those always says must go out go at once), when the client
// asked for them; stop ends them before the result is sent.
func (d Deps) lineProgress(ctx context.Context, req mcp.CallToolRequest, always func(string) bool) (send func(string), stop func()) {
	if d.Notifier == nil || req.Params.Meta == nil || req.Params.Meta.ProgressToken == nil {
		return nil, func() {}
	}
	token := req.Params.Meta.ProgressToken
	var mu sync.Mutex
	var last time.Time
	n := 0.0
	done := false
	return func(line string) {
			mu.Lock()
			defer mu.Unlock()
			if done || (time.Since(last) < progressInterval && (always == nil || !always(line))) {
				return
			}
			last = time.Now()
			n++
			d.Notifier.Progress(ctx, token, n, line)
		}, func() {
			mu.Lock()
			done = true
			mu.Unlock()
			d.Notifier.Flush(ctx, token)
		}
}

// installLine is an install as the shell line it amounts to, for the block
// list: the manager's command, then each package name as a command word too
// (installing a blocked command's package counts as naming it).
func installLine(manager string, packages []string) string {
	var b strings.Builder
	b.WriteString(manager)
	for _, p := range packages {
		name := p
		if i := strings.IndexAny(name, "=@<>!~["); i > 0 {
			name = name[:i] // the package, not its version
		}
		b.WriteString("; " + name)
	}
	return b.String()
}
