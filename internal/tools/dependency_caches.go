package tools

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/sandboxer/sandboxer/internal/deps"
)

// DependencyCache is one cache in list_dependency_caches' result.
type DependencyCache struct {
	Key       string   `json:"key" jsonschema:"the cache key (language, image and list)"`
	Volume    string   `json:"volume" jsonschema:"the Docker volume holding it"`
	Language  string   `json:"language" jsonschema:"the language"`
	Image     string   `json:"image" jsonschema:"the image it was installed with"`
	List      []string `json:"list" jsonschema:"the dependencies, sorted"`
	SizeBytes int64    `json:"size_bytes" jsonschema:"its size in bytes; -1 when unknown"`
	CreatedAt string   `json:"created_at" jsonschema:"when it was installed (RFC 3339)"`
	LastUsed  string   `json:"last_used" jsonschema:"when a script last used it (RFC 3339; its creation when not since this server started)"`
}

// ListDependencyCachesResult is list_dependency_caches' result.
type ListDependencyCachesResult struct {
	Caches     []DependencyCache `json:"caches" jsonschema:"the caches, least recently used first"`
	TotalBytes int64             `json:"total_bytes" jsonschema:"their known sizes added up"`
	LimitBytes int64             `json:"limit_bytes" jsonschema:"the cap (scripts.dependency_cache_mb); past it the least recently used are removed after an install"`
}

// ListDependencyCachesArgs are list_dependency_caches' arguments (none).
type ListDependencyCachesArgs struct{}

// PruneDependencyCachesArgs are prune_dependency_caches' arguments.
type PruneDependencyCachesArgs struct {
	Keys []string `json:"keys,omitempty" jsonschema:"cache keys; default all"`
}

// PruneDependencyCachesResult is prune_dependency_caches' result.
type PruneDependencyCachesResult struct {
	Removed      []DependencyCache `json:"removed" jsonschema:"the caches removed"`
	FreedBytes   int64             `json:"freed_bytes" jsonschema:"their known sizes added up"`
	NotRemovable string            `json:"not_removable,omitempty" jsonschema:"why some caches stayed (in use by a running script or an install)"`
}

func cacheOut(c deps.Cache) DependencyCache {
	return DependencyCache{Key: c.Key, Volume: c.Volume, Language: c.Language, Image: c.Image, List: c.List,
		SizeBytes: c.SizeBytes, CreatedAt: c.CreatedAt.UTC().Format(time.RFC3339), LastUsed: c.LastUsed.UTC().Format(time.RFC3339)}
}

func ListDependencyCaches(d Deps) Tool {
	in := inputSchema[ListDependencyCachesArgs](nil)
	def := mcp.NewTool("list_dependency_caches",
		mcp.WithDescription("run_script's dependency caches and sizes."),
		mcp.WithToolTitle("List dependency caches"),
		annotations("List dependency caches", true, false, true, false),
		withInput(in),
		withOutput[ListDependencyCachesResult](),
	)
	return Tool{Toolset: ToolsetExec, Def: def, args: in, Handler: func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		var args ListDependencyCachesArgs
		if err := in.bind(req, &args); err != nil {
			return errorResult("%v", err), nil
		}
		if d.Dependencies == nil {
			return errorResult("%s", d.lacks("dependency caches")), nil
		}
		all, err := d.Dependencies.List(ctx)
		if err != nil {
			return failure(err), nil
		}
		res := ListDependencyCachesResult{Caches: []DependencyCache{}, LimitBytes: d.policyOrDefault().Scripts.DependencyCacheMB << 20}
		var b strings.Builder
		for _, c := range all {
			res.Caches = append(res.Caches, cacheOut(c))
			res.TotalBytes += max(c.SizeBytes, 0)
			fmt.Fprintf(&b, "%s  %s  %d KiB  %s\n", c.Key, c.Language, max(c.SizeBytes, 0)>>10, strings.Join(c.List, " "))
		}
		fmt.Fprintf(&b, "%d caches, %d KiB of %d KiB", len(all), res.TotalBytes>>10, res.LimitBytes>>10)
		return structured(res, b.String()), nil
	}}
}

func PruneDependencyCaches(d Deps) Tool {
	in := inputSchema[PruneDependencyCachesArgs](nil)
	def := mcp.NewTool("prune_dependency_caches",
		mcp.WithDescription("Remove run_script's dependency caches."),
		mcp.WithToolTitle("Prune dependency caches"),
		annotations("Prune dependency caches", false, true, true, false),
		withInput(in),
		withOutput[PruneDependencyCachesResult](),
	)
	return Tool{Toolset: ToolsetExec, Def: def, args: in, Handler: func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		var args PruneDependencyCachesArgs
		if err := in.bind(req, &args); err != nil {
			return errorResult("%v", err), nil
		}
		if d.Dependencies == nil {
			return errorResult("%s", d.lacks("dependency caches")), nil
		}
		if len(args.Keys) > 1000 {
			return errorResult("keys has %d entries; the limit is 1000", len(args.Keys)), nil
		}
		removed, err := d.Dependencies.Prune(ctx, args.Keys)
		res := PruneDependencyCachesResult{Removed: []DependencyCache{}}
		for _, c := range removed {
			res.Removed = append(res.Removed, cacheOut(c))
			res.FreedBytes += max(c.SizeBytes, 0)
		}
		if err != nil {
			res.NotRemovable = cleanMessage(err.Error())
		}
		text := fmt.Sprintf("removed %d dependency caches (%d KiB)", len(removed), res.FreedBytes>>10)
		if res.NotRemovable != "" {
			text += "; " + res.NotRemovable
		}
		return structured(res, text), nil
	}}
}
