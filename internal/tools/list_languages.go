package tools

import (
	"context"
	"fmt"
	"strings"

	"github.com/mark3labs/mcp-go/mcp"
)

// LanguageInfo is one language of list_languages.
type LanguageInfo struct {
	Name        string `json:"name"`
	Image       string `json:"image"`
	Built       bool   `json:"built" jsonschema:"the image is present on the engine"`
	Description string `json:"description"`
	VersionCmd  string `json:"version_command" jsonschema:"run this with run_command and the language to see its version"`
}

// ListLanguagesResult is list_languages' result.
type ListLanguagesResult struct {
	Languages []LanguageInfo `json:"languages"`
	Default   string         `json:"default"`
	Engine    string         `json:"engine" jsonschema:"ok, or why the engine could not be asked"`
}

// ListLanguagesArgs takes nothing.
type ListLanguagesArgs struct{}

func ListLanguages(d Deps) Tool {
	def := mcp.NewTool("list_languages",
		mcp.WithDescription("The languages commands can run in, the image each maps to, and whether that image is built."),
		mcp.WithToolTitle("List languages"),
		annotations("List languages", true, false, true, false),
		mcp.WithInputSchema[ListLanguagesArgs](),
		mcp.WithOutputSchema[ListLanguagesResult](),
	)
	return Tool{Toolset: ToolsetInfo, Def: def, Handler: func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		var args ListLanguagesArgs
		if err := bind(req, &args); err != nil {
			return errorResult("%v", err), nil
		}
		res := ListLanguagesResult{Default: "bash", Engine: "ok"}
		var b strings.Builder
		engineOK := d.Runtime.Ping(ctx) == nil
		if !engineOK {
			res.Engine = d.Runtime.Ping(ctx).Error()
		}
		for _, l := range d.Languages.All() {
			_, image, _ := d.Languages.Lookup(l.Name)
			built := false
			if engineOK {
				built, _ = d.Runtime.ImageExists(ctx, image)
			}
			res.Languages = append(res.Languages, LanguageInfo{Name: l.Name, Image: image, Built: built, Description: l.Description, VersionCmd: l.VersionCmd})
			state := "built"
			if !built {
				state = "not built (make images)"
			}
			fmt.Fprintf(&b, "%-10s %s %s\n", l.Name, image, state)
		}
		if !engineOK {
			b.WriteString(res.Engine)
		}
		return structured(res, strings.TrimSpace(b.String())), nil
	}}
}
