package tools

import (
	"embed"
	"strings"
)

// Each tool's reference (every argument and result field, with defaults,
// limits and examples) is an MCP resource, sandboxer://docs/<tool>, which its
// description names: the tool list stays short, and an agent reads the
// details only when it needs them.

//go:embed docs/*.md
var docFiles embed.FS

// DocURIPrefix starts every tool's docs resource URI.
const DocURIPrefix = "sandboxer://docs/"

// Doc returns a tool's reference as markdown.
func Doc(tool string) (string, bool) {
	if strings.ContainsAny(tool, "/.") || tool == "" {
		return "", false
	}
	b, err := docFiles.ReadFile("docs/" + tool + ".md")
	if err != nil {
		return "", false
	}
	return string(b), true
}
