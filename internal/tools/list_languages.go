package tools

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/sandboxer/sandboxer/internal/lang"
	"github.com/sandboxer/sandboxer/internal/record"
	"github.com/sandboxer/sandboxer/internal/sandbox"
)

// LanguageInfo is one language of list_languages.
type LanguageInfo struct {
	Name        string `json:"name" jsonschema:"the name to give run_command as language"`
	Image       string `json:"image" jsonschema:"the image it runs in"`
	Built       bool   `json:"built" jsonschema:"the image is present on the engine"`
	Building    bool   `json:"building,omitempty" jsonschema:"the server is building the image now: jobs on it work once it is built"`
	Version     string `json:"version,omitempty" jsonschema:"the runtime's version, asked from a sandbox of its image"`
	Description string `json:"description" jsonschema:"what the image holds"`
	VersionCmd  string `json:"version_command" jsonschema:"run this with run_command and the language to see its version"`
	Runtime     string `json:"runtime,omitempty" jsonschema:"the OCI runtime its sandboxes run on, when the policy names one (runsc: gVisor)"`
}

// ListLanguagesResult is list_languages' result.
type ListLanguagesResult struct {
	Languages []LanguageInfo `json:"languages" jsonschema:"the languages, in their declared order"`
	Default   string         `json:"default" jsonschema:"the language run_command uses when none is given"`
	Engine    string         `json:"engine" jsonschema:"ok, or why the engine could not be asked"`
}

// ListLanguagesArgs takes nothing.
type ListLanguagesArgs struct{}

// versionTimeout bounds asking one image for its version.
const versionTimeout = 20 * time.Second

// listLanguagesTimeout bounds the whole call (versions are probed in parallel).
const listLanguagesTimeout = 40 * time.Second

// versionCache remembers versions by image reference: a tag names fixed content.
type versionCache struct {
	mu sync.Mutex
	v  map[string]string
}

func (c *versionCache) get(image string) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	v, ok := c.v[image]
	return v, ok
}

func (c *versionCache) put(image, version string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.v[image] = version
}

func ListLanguages(d Deps) Tool {
	versions := &versionCache{v: map[string]string{}}
	in := inputSchema[ListLanguagesArgs](nil)
	def := mcp.NewTool("list_languages",
		mcp.WithDescription("Languages, their images, whether each is built, and its version."),
		mcp.WithToolTitle("List languages"),
		annotations("List languages", true, false, true, false),
		withInput(in),
		withOutput[ListLanguagesResult](),
	)
	return Tool{Toolset: ToolsetInfo, Def: def, args: in, Handler: func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		var args ListLanguagesArgs
		if err := in.bind(req, &args); err != nil {
			return errorResult("%v", err), nil
		}
		// Every engine call below is bounded, so the call answers well within
		// a client's request timeout even when the engine hangs.
		ctx, cancel := context.WithTimeout(ctx, listLanguagesTimeout)
		defer cancel()
		res := ListLanguagesResult{Languages: []LanguageInfo{}, Default: lang.DefaultLanguage, Engine: "ok"}
		var b strings.Builder
		pingErr := d.Runtime.Ping(ctx)
		engineOK := pingErr == nil
		if !engineOK {
			res.Engine = cleanMessage(pingErr.Error())
		}
		for _, l := range d.Languages.All() {
			_, image, _ := d.Languages.Lookup(l.Name)
			built, building := false, false
			if engineOK {
				var err error
				built, err = d.Runtime.ImageExists(ctx, image)
				var ie *sandbox.ImageError
				building = errors.As(err, &ie) && ie.Building
			}
			res.Languages = append(res.Languages, LanguageInfo{Name: l.Name, Image: image, Built: built, Building: building, Description: l.Description, VersionCmd: l.VersionCmd, Runtime: d.Policy.Runtime})
		}
		res.Languages = append(res.Languages, d.templateLanguages(ctx)...)
		// Versions are asked once per image and command, all at once.
		var wg sync.WaitGroup
		for i := range res.Languages {
			info := &res.Languages[i]
			key := info.Image + " " + info.VersionCmd
			if v, ok := versions.get(key); ok {
				info.Version = v
				continue
			}
			if !info.Built {
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				if v, err := d.Jobs.Probe(ctx, info.Image, info.VersionCmd, versionTimeout); err == nil {
					versions.put(key, v)
					info.Version = v
				}
			}()
		}
		wg.Wait()
		for _, l := range res.Languages {
			state := "built"
			switch {
			case l.Built:
			case l.Building:
				state = "building (minutes)"
			case strings.HasPrefix(l.Description, "template"):
				state = "not built (on first use)"
			default:
				state = "not built (make images)"
			}
			if l.Runtime != "" {
				state += ", on " + l.Runtime
			}
			fmt.Fprintf(&b, "%-10s %-32s %-24s %s\n", l.Name, l.Image, state, l.Version)
		}
		if !engineOK {
			b.WriteString(res.Engine)
		}
		return structured(res, strings.TrimSpace(b.String())), nil
	}}
}

// templateLanguages are the templates ctx's tenant sees, as languages.
func (d Deps) templateLanguages(ctx context.Context) []LanguageInfo {
	var out []LanguageInfo
	for _, t := range d.Templates.List(ctx) {
		desc := fmt.Sprintf("template on %s from its Dockerfile, key %s", t.Language, t.Key)
		if t.Source == record.TemplateSnapshot {
			desc = fmt.Sprintf("template on %s, a snapshot of workspace %s, key %s", t.Language, t.Workspace, t.Key)
		}
		if t.Problem != "" {
			desc += "; " + cleanMessage(t.Problem)
		}
		version := ""
		if l, ok := lang.Builtin(t.Language); ok {
			version = l.VersionCmd
		}
		out = append(out, LanguageInfo{Name: t.Name, Image: t.Image, Built: t.Image != "", Description: desc, VersionCmd: version,
			Runtime: d.Policy.TemplateRuntime(t.Name, t.Source == record.TemplateSnapshot)})
	}
	return out
}
