package tools

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/url"
	"path"
	"strings"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/sandboxer/sandboxer/internal/job"
	"github.com/sandboxer/sandboxer/internal/lang"
	"github.com/sandboxer/sandboxer/internal/record"
	"github.com/sandboxer/sandboxer/internal/supervisor/proto"
	"github.com/sandboxer/sandboxer/internal/workspace"
)

// validateReturns checks the returns argument's patterns.
func validateReturns(patterns []string) error {
	if len(patterns) > proto.MaxPatterns {
		return fmt.Errorf("returns has %d patterns; at most %d", len(patterns), proto.MaxPatterns)
	}
	for i, p := range patterns {
		if err := proto.CheckPattern(p); err != nil {
			return fmt.Errorf("returns[%d]: %v", i, err)
		}
	}
	return nil
}

// JobFileURI is the resource a fresh sandbox's returned file is read from.
func JobFileURI(jobID, name string) string {
	return "job://" + jobID + "/files/" + escapePath(name)
}

// WorkspaceFileURI is the resource of a file in a workspace.
func WorkspaceFileURI(workspace, name string) string {
	return "workspace://" + url.PathEscape(workspace) + "/" + escapePath(name)
}

func escapePath(name string) string {
	parts := strings.Split(name, "/")
	for i, p := range parts {
		parts[i] = url.PathEscape(p)
	}
	return strings.Join(parts, "/")
}

// withReturned adds what the job returned to its result: each figure as an
// image with a line naming it, each file as a resource link.
func (d Deps) withReturned(ctx context.Context, res *mcp.CallToolResult, rec *record.Job) *mcp.CallToolResult {
	n := 0
	for _, f := range rec.Details.Returned {
		switch {
		case f.Kind == proto.KindFigure:
			n++
			d.addFigure(ctx, res, rec.ID, n, f)
		case f.Listed && rec.Workspace != "":
			rel := path.Join(strings.TrimPrefix(strings.TrimPrefix(rec.Cwd, workspaceRoot), "/"), f.Path)
			res.Content = append(res.Content, fileLink(WorkspaceFileURI(rec.Workspace, rel), rel, f))
		default:
			res.Content = append(res.Content, fileLink(JobFileURI(rec.ID, f.Path), f.Path, f))
		}
	}
	return res
}

// withNewFigures adds the figures a running job (a REPL) returned since
// the last call that showed its figures.
func (d Deps) withNewFigures(ctx context.Context, res *mcp.CallToolResult, id string) *mcp.CallToolResult {
	if res.IsError || d.Jobs == nil {
		return res
	}
	figs, err := d.Jobs.NewFigures(ctx, id)
	if err != nil {
		return res
	}
	for i, f := range figs {
		d.addFigure(ctx, res, id, i+1, f)
	}
	return res
}

// addFigure adds figure n of a job as a line naming it and the image.
func (d Deps) addFigure(ctx context.Context, res *mcp.CallToolResult, id string, n int, f record.ReturnedFile) {
	data, _, err := d.Jobs.Returned(ctx, id, f.Kind, f.Path, proto.MaxFigureBytes)
	if err != nil {
		res.Content = append(res.Content, mcp.NewTextContent(fmt.Sprintf("figure %s: not readable: %v", f.Path, err)))
		return
	}
	res.Content = append(res.Content,
		mcp.NewTextContent(fmt.Sprintf("figure %d: %d×%d PNG", n, f.Width, f.Height)),
		mcp.NewImageContent(base64.StdEncoding.EncodeToString(data), "image/png"))
}

func fileLink(uri, name string, f record.ReturnedFile) mcp.ResourceLink {
	l := mcp.NewResourceLink(uri, name, fmt.Sprintf("returned file, %d bytes", f.Size), f.MIME)
	size := f.Size
	l.Size = &size
	return l
}

// capturesFigures says whether jobs of the language get their figures back.
func capturesFigures(language string) bool {
	l, ok := lang.Builtin(language)
	return ok && l.Figures
}

// MaxFileResourceBytes is the most resources/read returns of one file.
const MaxFileResourceBytes = workspace.MaxReadBytes

// FileResourceError is a file resource that cannot be served: its sentence
// says why (not found, another tenant's, too large, not a file URI).
type FileResourceError struct{ Msg string }

func (e *FileResourceError) Error() string { return e.Msg }

// ReadFileResource serves job://{job_id}/files/{path} (a file a fresh
// sandbox returned, kept with its job) and workspace://{name}/{path} (a file
// of the caller's workspace): its bytes and MIME type.
func (d Deps) ReadFileResource(ctx context.Context, uri string) ([]byte, string, error) {
	notFound := func(format string, args ...any) error { return &FileResourceError{fmt.Sprintf(format, args...)} }
	if rest, ok := strings.CutPrefix(uri, "job://"); ok {
		id, escaped, ok := strings.Cut(rest, "/files/")
		name, err := url.PathUnescape(escaped)
		if !ok || err != nil || id == "" || name == "" {
			return nil, "", notFound("%q is not a returned file's URI: job://{job_id}/files/{path}", uri)
		}
		data, f, err := d.Jobs.Returned(ctx, id, proto.KindFile, name, MaxFileResourceBytes)
		switch {
		case errors.Is(err, record.ErrJobNotFound), errors.Is(err, job.ErrNotReturned):
			return nil, "", notFound("no returned file %q of job %q: a job's result links the files it returned", name, id)
		case err != nil:
			return nil, "", err
		}
		return data, f.MIME, nil
	}
	rest, ok := strings.CutPrefix(uri, "workspace://")
	name, escaped, cut := strings.Cut(rest, "/")
	p, err := url.PathUnescape(escaped)
	if !ok || !cut || err != nil || p == "" {
		return nil, "", notFound("%q is not a file resource: job://{job_id}/files/{path} or workspace://{name}/{path}", uri)
	}
	if ws, err := url.PathUnescape(name); err == nil {
		name = ws
	}
	ws, rel, problem := d.workspaceFile(name, p)
	if problem != nil {
		return nil, "", notFound("%s", ResultText(problem))
	}
	res, err := ws.ReadFile(ctx, name, rel, 0, 0, MaxFileResourceBytes)
	if err != nil {
		return nil, "", notFound("%s", ResultText(fileFailure(rel, err)))
	}
	if res.Truncated {
		return nil, "", notFound("%s is %d bytes, over the %d resources/read returns: read it by lines with read_file", rel, res.Size, MaxFileResourceBytes)
	}
	return res.Content, job.MIMEType(rel, res.Content), nil
}

// ResultText is a result's text (its text content items, joined).
func ResultText(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if t, ok := c.(mcp.TextContent); ok {
			b.WriteString(t.Text)
		}
	}
	return b.String()
}
