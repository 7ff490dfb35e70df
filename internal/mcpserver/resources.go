package mcpserver

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/sandboxer/sandboxer/internal/job"
	"github.com/sandboxer/sandboxer/internal/output"
	"github.com/sandboxer/sandboxer/internal/record"
	"github.com/sandboxer/sandboxer/internal/tools"
)

// listedJobs is how many of the newest jobs resources/list names.
const listedJobs = 50

// resourceNotFound is a resources/read of something that is not there; it is
// answered as JSON-RPC error -32002 (resource not found) with its sentence.
// mcp-go answers any error a resource handler returns with -32603, so an
// OnError hook has the wire replace that answer (see wire.override).
type resourceNotFound struct{ msg string }

func (e *resourceNotFound) Error() string { return e.msg }

// notFoundCode is the code for a resource that is not there: -32002 up to
// revision 2025-11-25; the 2026-07-28 revision uses -32602 (invalid params)
// instead, as mcp-go itself does (server/resource_errors.go).
func notFoundCode(ctx context.Context) int {
	if server.IsModernRequest(ctx) {
		return mcp.INVALID_PARAMS
	}
	return mcp.RESOURCE_NOT_FOUND
}

func (s *Server) addResources(hooks *server.Hooks) {
	recordTmpl := mcp.NewResourceTemplate("job://{job_id}", "job",
		mcp.WithTemplateDescription("A job's record as JSON"), mcp.WithTemplateMIMEType("application/json"))
	outputTmpl := mcp.NewResourceTemplate("job://{job_id}/output", "job output",
		mcp.WithTemplateDescription("A job's captured output (both streams, interleaved), as text; the first 1 MiB"),
		mcp.WithTemplateMIMEType("text/plain"))
	// One handler for both: which template mcp-go matches a URI against first
	// is not fixed, so the URI decides.
	s.mcp.AddResourceTemplate(recordTmpl, s.readJobResource)
	s.mcp.AddResourceTemplate(outputTmpl, s.readJobResource)
	sourceTmpl := mcp.NewResourceTemplate("job://{job_id}/source", "script source",
		mcp.WithTemplateDescription("A script job's source code, as run_script received it"),
		mcp.WithTemplateMIMEType("text/plain"))
	s.mcp.AddResourceTemplate(sourceTmpl, s.readJobResource)
	filesTmpl := mcp.NewResourceTemplate("job://{job_id}/files/{+path}", "returned file",
		mcp.WithTemplateDescription("A file a fresh sandbox's job returned (returns), kept with the job"))
	s.mcp.AddResourceTemplate(filesTmpl, s.readFileResource)
	if s.deps.Workspaces != nil {
		wsTmpl := mcp.NewResourceTemplate("workspace://{name}/{+path}", "workspace file",
			mcp.WithTemplateDescription("A file of one of your workspaces (up to 8 MiB)"))
		s.mcp.AddResourceTemplate(wsTmpl, s.readFileResource)
	}

	s.addDocResources()

	hooks.AddOnError(func(ctx context.Context, id any, method mcp.MCPMethod, message any, err error) {
		if method != mcp.MethodResourcesRead {
			return
		}
		uri := ""
		if req, ok := message.(*mcp.ReadResourceRequest); ok {
			uri = req.Params.URI
		}
		data := map[string]string{"uri": uri} // the 2026-07-28 revision names the resource (SEP-2164)
		var nf *resourceNotFound
		switch {
		case errors.As(err, &nf):
			s.override(ctx, id, notFoundCode(ctx), nf.msg, data)
		case errors.Is(err, server.ErrResourceNotFound):
			// No template matched (mcp-go already uses the right code): say
			// what exists instead of "handler not found".
			s.override(ctx, id, notFoundCode(ctx), notAJobURI(uri), data)
		}
	})
	hooks.AddAfterListResources(func(ctx context.Context, id any, req *mcp.ListResourcesRequest, res *mcp.ListResourcesResult) {
		if req.Params.Cursor != "" || s.deps.Jobs == nil {
			return
		}
		jobs, _, err := s.deps.Jobs.List(ctx, record.ListFilter{Limit: listedJobs})
		if err != nil {
			return
		}
		for _, rec := range jobs {
			res.Resources = append(res.Resources, jobResource(rec))
		}
	})
}

// overrideSlot, in a request's context, takes the error its answer is to
// carry instead of mcp-go's (frontHTTP); without one the stdio wire does.
type overrideSlot struct {
	set  bool
	code int
	msg  string
	data any
}

type overrideKey struct{}

func (s *Server) override(ctx context.Context, id any, code int, msg string, data any) {
	if slot, ok := ctx.Value(overrideKey{}).(*overrideSlot); ok {
		slot.set, slot.code, slot.msg, slot.data = true, code, msg, data
		return
	}
	s.wire.override(id, code, msg, data)
}

// jobResource describes a job in resources/list.
func jobResource(rec *record.Job) mcp.Resource {
	status := rec.Status
	if rec.Reason != "" {
		status += " (" + rec.Reason + ")"
	}
	cmd := strings.Join(strings.Fields(rec.Command), " ")
	if len([]rune(cmd)) > 80 {
		cmd = string([]rune(cmd)[:80]) + "…"
	}
	short := rec.ID
	if len(short) > 8 {
		short = short[:8]
	}
	desc := fmt.Sprintf("%s %s job, %s, created %s: %s", status, rec.Language, rec.Kind, rec.CreatedAt.UTC().Format("2006-01-02 15:04:05Z"), cmd)
	r := mcp.NewResource("job://"+rec.ID, "job "+short+" "+rec.Status,
		mcp.WithResourceDescription(desc), mcp.WithMIMEType("application/json"))
	r.Title = fmt.Sprintf("%s: %s", status, cmd)
	return r
}

func notAJobURI(uri string) string {
	return fmt.Sprintf("%q is not a job resource: use job://{job_id}, job://{job_id}/output or job://{job_id}/source with a job_id from list_jobs or resources/list", truncate(uri, 200))
}

// readJobResource serves job://{job_id} (the record as JSON) and
// job://{job_id}/output (the output as text).
func (s *Server) readJobResource(ctx context.Context, req mcp.ReadResourceRequest) ([]mcp.ResourceContents, error) {
	uri := req.Params.URI
	if strings.Contains(uri, "/files/") {
		return s.readFileResource(ctx, req)
	}
	rest, ok := strings.CutPrefix(uri, "job://")
	id, wantSource := strings.CutSuffix(rest, "/source")
	id, wantOutput := strings.CutSuffix(id, "/output")
	if !ok || id == "" || strings.ContainsAny(id, "/?#") {
		return nil, &resourceNotFound{notAJobURI(uri)}
	}
	unknown := func() error {
		return &resourceNotFound{fmt.Sprintf("no job %q: list_jobs or resources/list shows the known ones", truncate(id, 100))}
	}
	if wantSource {
		rec, err := s.deps.Jobs.Get(ctx, id)
		if errors.Is(err, record.ErrJobNotFound) {
			return nil, unknown()
		}
		if err != nil {
			return nil, err
		}
		if rec.Details.Script == nil {
			return nil, &resourceNotFound{fmt.Sprintf("job %s is a %s job, not a script: it has no source", rec.ID, rec.Kind)}
		}
		return []mcp.ResourceContents{mcp.TextResourceContents{URI: uri, MIMEType: "text/plain", Text: rec.Details.Script.Source}}, nil
	}
	if !wantOutput {
		rec, err := s.deps.Jobs.Get(ctx, id)
		if errors.Is(err, record.ErrJobNotFound) {
			return nil, unknown()
		}
		if err != nil {
			return nil, err
		}
		// Not json.MarshalIndent: it would escape <, > and & in the text.
		var data bytes.Buffer
		enc := json.NewEncoder(&data)
		enc.SetEscapeHTML(false)
		enc.SetIndent("", "  ")
		if err := enc.Encode(tools.RecordOf(rec)); err != nil {
			return nil, err
		}
		text := strings.TrimSuffix(data.String(), "\n")
		return []mcp.ResourceContents{mcp.TextResourceContents{URI: uri, MIMEType: "application/json", Text: text}}, nil
	}
	zero := int64(0)
	r, err := s.deps.Jobs.Read(ctx, id, job.ReadRequest{Stream: output.Both, Cursor: &zero, MaxBytes: resourceOutputBytes, StripANSI: true, Peek: true})
	if errors.Is(err, record.ErrJobNotFound) {
		return nil, unknown()
	}
	if err != nil {
		return nil, err
	}
	text, _ := output.ToText(r.Data)
	if r.HasMore {
		text += "\n... [more output: read_output with cursor " + fmt.Sprint(r.NextCursor) + "]\n"
	}
	return []mcp.ResourceContents{mcp.TextResourceContents{URI: uri, MIMEType: "text/plain", Text: text}}, nil
}

// readFileResource serves a returned file or a workspace's file: text when
// it is UTF-8, else a base64 blob.
func (s *Server) readFileResource(ctx context.Context, req mcp.ReadResourceRequest) ([]mcp.ResourceContents, error) {
	uri := req.Params.URI
	data, mime, err := s.deps.ReadFileResource(ctx, uri)
	var fe *tools.FileResourceError
	if errors.As(err, &fe) {
		return nil, &resourceNotFound{fe.Msg}
	}
	if err != nil {
		return nil, err
	}
	if utf8.Valid(data) && !bytes.ContainsRune(data, 0) && !strings.HasPrefix(mime, "image/") {
		return []mcp.ResourceContents{mcp.TextResourceContents{URI: uri, MIMEType: mime, Text: string(data)}}, nil
	}
	return []mcp.ResourceContents{mcp.BlobResourceContents{URI: uri, MIMEType: mime, Blob: base64.StdEncoding.EncodeToString(data)}}, nil
}

// addDocResources serves each listed tool's reference at sandboxer://docs/<tool>.
func (s *Server) addDocResources() {
	for _, t := range s.mcp.ListTools() {
		name := t.Tool.Name
		doc, ok := tools.Doc(name)
		if !ok {
			continue // TestEveryToolHasDocs keeps this from happening
		}
		uri := tools.DocURIPrefix + name
		s.mcp.AddResource(mcp.NewResource(uri, name+" docs",
			mcp.WithResourceDescription("Reference of the "+name+" tool: every argument and result field"),
			mcp.WithMIMEType("text/markdown")),
			func(ctx context.Context, req mcp.ReadResourceRequest) ([]mcp.ResourceContents, error) {
				return []mcp.ResourceContents{mcp.TextResourceContents{URI: uri, MIMEType: "text/markdown", Text: doc}}, nil
			})
	}
}
