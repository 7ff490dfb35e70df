package console

import (
	"bytes"
	"context"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"net/url"
	"path"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/sandboxer/sandboxer/internal/audit"
	"github.com/sandboxer/sandboxer/internal/auth"
	"github.com/sandboxer/sandboxer/internal/job"
	"github.com/sandboxer/sandboxer/internal/output"
	"github.com/sandboxer/sandboxer/internal/record"
	"github.com/sandboxer/sandboxer/internal/tenant"
)

// Bounds of what a page shows.
const (
	listLimit       = 100       // jobs in the list
	outputPageBytes = 256 << 10 // a job page shows at most the last this much output
	auditRows       = 500       // newest audit lines shown
	fileBytes       = 256 << 10 // a workspace file shown
	dirEntries      = 500       // a workspace directory's entries shown
)

// page is what every template gets.
type page struct {
	Title, Nav string
	Tenant     string
	Role       string
	Admin      bool
	CSRF       string
	Data       any
}

func (c *Console) page(sess *session, nav, title string, data any) page {
	return page{Title: title, Nav: nav, Tenant: sess.tenant, Role: sess.role, Admin: sess.role == auth.RoleAdmin, CSRF: sess.csrf, Data: data}
}

func parsePages() map[string]*template.Template {
	funcs := template.FuncMap{"bytes": humanBytes}
	base := template.Must(template.New("layout.html").Funcs(funcs).ParseFS(files, "templates/layout.html"))
	names, _ := fs.Glob(files, "templates/*.html")
	out := map[string]*template.Template{}
	for _, n := range names {
		name := strings.TrimSuffix(path.Base(n), ".html")
		if name == "layout" {
			continue
		}
		out[name] = template.Must(template.Must(base.Clone()).ParseFS(files, n))
	}
	return out
}

// render writes a page; it is rendered whole first, so a template error is a
// 500 and not half a page.
func (c *Console) render(w http.ResponseWriter, code int, name string, p page) {
	var b bytes.Buffer
	if err := c.pages[name].ExecuteTemplate(&b, "layout.html", p); err != nil {
		http.Error(w, "render "+name+": "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(code)
	_, _ = w.Write(b.Bytes())
}

// problem shows an error on a page of its own.
func (c *Console) problem(w http.ResponseWriter, sess *session, code int, nav, msg string) {
	c.render(w, code, "problem", c.page(sess, nav, http.StatusText(code), msg))
}

// jobFilter is the jobs page's filter, from its query.
type jobFilter struct {
	Status, Kind, Language, Workspace, Tenant string
}

var (
	jobStatuses = []string{"queued", "running", "completed", "failed", "timed_out", "killed"}
	jobKinds    = []string{"command", "script", "session"}
)

func jobFilterOf(r *http.Request) jobFilter {
	q := r.URL.Query()
	f := jobFilter{Status: q.Get("status"), Kind: q.Get("kind"), Language: trim(q.Get("language"), 64),
		Workspace: trim(q.Get("workspace"), 64), Tenant: trim(q.Get("tenant"), 128)}
	if f.Status != "active" && !slices.Contains(jobStatuses, f.Status) {
		f.Status = ""
	}
	if !slices.Contains(jobKinds, f.Kind) {
		f.Kind = ""
	}
	return f
}

// scope narrows an admin's context to one tenant when the filter names one
// (the store then filters as for that tenant); anyone else sees their own.
func (f jobFilter) scope(ctx context.Context) context.Context {
	if t, _ := tenant.From(ctx); t.Admin && f.Tenant != "" {
		return tenant.With(ctx, tenant.Tenant{Name: f.Tenant, ReadOnly: true})
	}
	return ctx
}

func (f jobFilter) list() record.ListFilter {
	l := record.ListFilter{Kind: f.Kind, Workspace: f.Workspace, Language: f.Language, Limit: listLimit}
	switch f.Status {
	case "active":
		l.Status = []string{"queued", "running"}
	case "":
	default:
		l.Status = []string{f.Status}
	}
	return l
}

// jobRow is one line of the jobs list, formatted for display (also sent to
// the page's script as JSON, which puts each field in as text).
type jobRow struct {
	ID        string `json:"id"`
	Short     string `json:"short"`
	Kind      string `json:"kind"`
	Status    string `json:"status"`
	Reason    string `json:"reason"`
	Language  string `json:"language"`
	Workspace string `json:"workspace"`
	Command   string `json:"command"`
	Created   string `json:"created"`
	Took      string `json:"took"`
	// Tenant owns the job: shown to admins only (who see every tenant's).
	Tenant string `json:"tenant,omitempty"`
}

func rowOf(j *record.Job, now time.Time) jobRow {
	r := jobRow{ID: j.ID, Short: shortID(j.ID), Kind: j.Kind, Status: j.Status, Reason: j.Reason, Language: j.Language,
		Workspace: j.Workspace, Command: trim(firstLine(j.Command), 120), Created: when(j.CreatedAt, now)}
	if sd := j.Details.Script; sd != nil { // a script's record holds "run_script LANG": show the script
		if sd.Path != "" {
			r.Command = trim(sd.Path+" "+strings.Join(sd.Args, " "), 120)
		} else {
			r.Command = trim(firstLine(strings.TrimSpace(sd.Source)), 120)
		}
	}
	if j.ExitCode != nil && j.Reason == "exit_code" {
		r.Reason = fmt.Sprintf("exit %d", *j.ExitCode)
	}
	if !j.StartedAt.IsZero() {
		end := j.EndedAt
		if end.IsZero() {
			end = now
		}
		r.Took = end.Sub(j.StartedAt).Round(100 * time.Millisecond).String()
	}
	return r
}

func (c *Console) jobRows(ctx context.Context, f jobFilter) ([]jobRow, error) {
	jobs, _, err := c.Jobs.List(f.scope(ctx), f.list())
	if err != nil {
		return nil, err
	}
	now := time.Now()
	admin := tenant.Scope(ctx) == ""
	rows := make([]jobRow, 0, len(jobs))
	for _, j := range jobs {
		r := rowOf(j, now)
		if admin {
			r.Tenant = j.Tenant
		}
		rows = append(rows, r)
	}
	return rows, nil
}

type jobsData struct {
	Filter          jobFilter
	Statuses, Kinds []string
	Rows            []jobRow
	Query           string
}

func (c *Console) jobsPage(w http.ResponseWriter, r *http.Request, sess *session) {
	f := jobFilterOf(r)
	rows, err := c.jobRows(r.Context(), f)
	if err != nil {
		c.problem(w, sess, http.StatusInternalServerError, "jobs", err.Error())
		return
	}
	c.render(w, http.StatusOK, "jobs", c.page(sess, "jobs", "Jobs", jobsData{Filter: f, Statuses: append([]string{"active"}, jobStatuses...),
		Kinds: jobKinds, Rows: rows, Query: r.URL.RawQuery}))
}

// field is one labelled value of a record.
type field struct{ Name, Value string }

type jobData struct {
	Job      *record.Job
	Fields   []field
	Usage    []field
	Source   string // a script's text
	Command  string
	Output   []Segment
	From     int64 // where the page's output starts
	Next     int64 // where the live stream continues
	Screen   []string
	Finished bool
}

func jobFields(j *record.Job) (fields, usage []field) {
	add := func(name, v string) {
		if v != "" {
			fields = append(fields, field{name, v})
		}
	}
	add("id", j.ID)
	add("kind", j.Kind)
	add("status", j.Status)
	add("reason", j.Reason)
	if j.ExitCode != nil {
		add("exit code", fmt.Sprint(*j.ExitCode))
	}
	add("signal", j.Signal)
	add("language", j.Language)
	add("image", j.Image)
	add("workspace", j.Workspace)
	add("cwd", j.Cwd)
	if len(j.Env) > 0 { // names only: values may be secrets
		keys := make([]string, 0, len(j.Env))
		for _, kv := range j.Env {
			k, _, _ := strings.Cut(kv, "=")
			keys = append(keys, k)
		}
		add("env", strings.Join(keys, " "))
	}
	if s := j.Details.Session; s != nil {
		add("terminal", fmt.Sprintf("%s %d×%d", s.Mode, s.Cols, s.Rows))
	}
	add("created", stamp(j.CreatedAt))
	add("started", stamp(j.StartedAt))
	add("ended", stamp(j.EndedAt))
	add("error", j.Error)
	u := j.Usage
	usage = []field{
		{"wall", (time.Duration(u.WallMS) * time.Millisecond).String()},
		{"cpu", (time.Duration(u.CPUMS) * time.Millisecond).String()},
		{"peak memory", humanBytes(u.PeakMemoryBytes)},
		{"stdout", humanBytes(j.StdoutBytes)},
		{"stderr", humanBytes(j.StderrBytes)},
	}
	if j.DroppedBytes > 0 {
		usage = append(usage, field{"dropped", humanBytes(j.DroppedBytes)})
	}
	return fields, usage
}

func (c *Console) jobPage(w http.ResponseWriter, r *http.Request, sess *session) {
	id := r.PathValue("id")
	j, err := c.Jobs.Get(r.Context(), id)
	if err != nil {
		c.problem(w, sess, http.StatusNotFound, "jobs", "No job "+trim(id, 80)+" here.")
		return
	}
	d := jobData{Job: j, Finished: record.Finished(j.Status)}
	d.Fields, d.Usage = jobFields(j)
	d.Command = j.Command
	if sd := j.Details.Script; sd != nil {
		d.Source = sd.Source
		d.Fields = append(d.Fields, field{"script", strings.TrimSpace(sd.Path + " " + strings.Join(sd.Args, " "))})
		if len(sd.Dependencies) > 0 {
			d.Fields = append(d.Fields, field{"dependencies", strings.Join(sd.Dependencies, " ")})
		}
	}
	total := j.StdoutBytes + j.StderrBytes
	from := max(0, total-outputPageBytes)
	res, err := c.Jobs.Read(r.Context(), id, job.ReadRequest{Stream: output.Both, Cursor: &from, MaxBytes: outputPageBytes, Peek: true})
	if err == nil {
		d.From, d.Next = res.Start, res.NextCursor
		d.Output = newANSI().feed(res.Data)
		d.Job = res.Job
	}
	if s := j.Details.Session; s != nil && s.Mode == job.ModePTY {
		if scr, _, err := c.Jobs.Screen(r.Context(), id); err == nil {
			d.Screen = scr.Lines
		}
	}
	c.render(w, http.StatusOK, "job", c.page(sess, "jobs", "Job "+shortID(j.ID), d))
}

func (c *Console) killJob(w http.ResponseWriter, r *http.Request, sess *session) {
	id := r.PathValue("id")
	_, err := c.Jobs.Kill(r.Context(), id, "TERM", 5*time.Second, record.ReasonRequested)
	c.audited(r, "console.kill_job", sess.tenant, id, "ok", err)
	if err != nil {
		c.problem(w, sess, http.StatusConflict, "jobs", "Kill "+trim(id, 80)+": "+err.Error())
		return
	}
	http.Redirect(w, r, "/ui/jobs/"+id, http.StatusSeeOther)
}

// wsRow is one workspace in the list.
type wsRow struct {
	*record.Workspace
	Packages int
	Limit    string
	// Ref is how the viewer names it in a URL: its name, or (an admin, for
	// another tenant's) TENANT/NAME, path-escaped.
	Ref string
}

// wsRef is w's name as ctx's viewer names it (TENANT/NAME for another
// tenant's), escaped for a URL path segment.
func wsRef(ctx context.Context, w *record.Workspace) string {
	if w.Tenant != "" && w.Tenant != tenant.Owner(ctx) {
		return url.PathEscape(w.Tenant + "/" + w.Name)
	}
	return url.PathEscape(w.Name)
}

func (c *Console) workspacesPage(w http.ResponseWriter, r *http.Request, sess *session) {
	if c.Workspaces == nil || !c.Workspaces.Enabled() {
		c.problem(w, sess, http.StatusNotFound, "workspaces", "Workspaces are off (policy workspaces.enabled).")
		return
	}
	list, err := c.Workspaces.List(r.Context())
	if err != nil {
		c.problem(w, sess, http.StatusInternalServerError, "workspaces", err.Error())
		return
	}
	rows := make([]wsRow, 0, len(list))
	for _, ws := range list {
		n := 0
		for _, p := range ws.Details.Installed {
			n += len(p)
		}
		row := wsRow{Workspace: ws, Packages: n, Ref: wsRef(r.Context(), ws)}
		if ws.Limits.DiskBytes > 0 {
			row.Limit = humanBytes(ws.Limits.DiskBytes)
		}
		rows = append(rows, row)
	}
	c.render(w, http.StatusOK, "workspaces", c.page(sess, "workspaces", "Workspaces", rows))
}

type wsData struct {
	W        *record.Workspace
	Ref      string // as wsRow's
	Size     string
	Managers []field // manager → packages
	Path     string  // the directory listed, relative to /workspace
	Parent   string
	Entries  []entryRow
	File     string // the file shown
	Content  string
	Note     string
}

type entryRow struct {
	Name, Path, Type, Size, MTime string
}

func (c *Console) workspacePage(w http.ResponseWriter, r *http.Request, sess *session) {
	if c.Workspaces == nil || !c.Workspaces.Enabled() {
		c.problem(w, sess, http.StatusNotFound, "workspaces", "Workspaces are off (policy workspaces.enabled).")
		return
	}
	name := r.PathValue("name")
	ws, err := c.Workspaces.Get(r.Context(), name)
	if err != nil {
		c.problem(w, sess, http.StatusNotFound, "workspaces", "No workspace "+trim(name, 80)+" here.")
		return
	}
	d := wsData{W: ws, Ref: wsRef(r.Context(), ws), Path: cleanRel(r.URL.Query().Get("path")), File: cleanRel(r.URL.Query().Get("file"))}
	for _, m := range sortedKeys(ws.Details.Installed) {
		d.Managers = append(d.Managers, field{m, strings.Join(ws.Details.Installed[m], " ")})
	}
	// Browsing must not wake a stopped workspace (that would start its
	// container and reset its idle clock): only a running one is read.
	if ws.State != "running" {
		d.Note = "The workspace is " + ws.State + ": its files can be browsed while it runs."
		c.render(w, http.StatusOK, "workspace", c.page(sess, "workspaces", "Workspace "+ws.Name, d))
		return
	}
	if n, err := c.Workspaces.DiskUsage(r.Context(), name); err == nil {
		d.Size = humanBytes(n)
	}
	if d.File != "" {
		res, err := c.Workspaces.ReadFile(r.Context(), name, d.File, 0, 0, fileBytes)
		if err != nil {
			d.Note = err.Error()
		} else {
			d.Content = strings.ToValidUTF8(string(res.Content), "\uFFFD")
			if res.Truncated {
				d.Note = fmt.Sprintf("Showing the first %s of %s.", humanBytes(fileBytes), humanBytes(res.Size))
			}
		}
		d.Path = path.Dir(d.File)
	} else {
		dir := d.Path
		if dir == "" {
			dir = "."
		}
		res, err := c.Workspaces.ListFiles(r.Context(), name, dir, false, "", dirEntries)
		if err != nil {
			d.Note = err.Error()
		} else {
			for _, e := range res.Entries {
				d.Entries = append(d.Entries, entryRow{Name: e.Name, Path: e.Path, Type: e.Type, Size: humanBytes(e.Size), MTime: e.MTime})
			}
			sort.Slice(d.Entries, func(i, j int) bool {
				if (d.Entries[i].Type == "dir") != (d.Entries[j].Type == "dir") {
					return d.Entries[i].Type == "dir"
				}
				return d.Entries[i].Name < d.Entries[j].Name
			})
			if res.Truncated {
				d.Note = fmt.Sprintf("Showing the first %d entries.", dirEntries)
			}
		}
	}
	if d.Path == "." {
		d.Path = ""
	}
	if d.Path != "" {
		d.Parent = path.Dir(d.Path)
		if d.Parent == "." {
			d.Parent = ""
		}
	}
	c.render(w, http.StatusOK, "workspace", c.page(sess, "workspaces", "Workspace "+ws.Name, d))
}

func (c *Console) deleteWorkspace(w http.ResponseWriter, r *http.Request, sess *session) {
	name := r.PathValue("name")
	if c.Workspaces == nil {
		c.problem(w, sess, http.StatusNotFound, "workspaces", "Workspaces are off.")
		return
	}
	err := c.Workspaces.Delete(r.Context(), name)
	c.audited(r, "console.delete_workspace", sess.tenant, "", "ok", err)
	if err != nil {
		c.problem(w, sess, http.StatusConflict, "workspaces", "Delete "+trim(name, 80)+": "+err.Error())
		return
	}
	http.Redirect(w, r, "/ui/workspaces", http.StatusSeeOther)
}

type auditData struct {
	Tenant, Tool, Decision, Since string
	Decisions                     []string
	Entries                       []auditRow
	Note                          string
}

type auditRow struct {
	audit.Entry
	When, Tenant string
}

func (c *Console) auditPage(w http.ResponseWriter, r *http.Request, sess *session) {
	q := r.URL.Query()
	d := auditData{Tenant: trim(q.Get("tenant"), 128), Tool: trim(q.Get("tool"), 64), Decision: q.Get("decision"),
		Since: trim(q.Get("since"), 64), Decisions: []string{audit.Allowed, audit.Blocked, audit.Refused}}
	if !slices.Contains(d.Decisions, d.Decision) {
		d.Decision = ""
	}
	var f audit.Filter
	if d.Since != "" {
		if dur, err := time.ParseDuration(d.Since); err == nil {
			f.Since = time.Now().Add(-dur)
		} else if t, err := time.Parse(time.RFC3339, d.Since); err == nil {
			f.Since = t
		} else {
			d.Note = "since: want a duration like 90m or a time like 2026-01-02T15:04:05Z"
		}
	}
	// A non-admin reads only its own tenant's lines, whatever it asks.
	own := ""
	if sess.role != auth.RoleAdmin {
		own = sess.tenant
	}
	now := time.Now()
	var ring []auditRow
	err := audit.Read(c.AuditDir, f, func(e audit.Entry, _ []byte) error {
		t := e.Tenant
		if t == "" {
			t = tenant.Local
		}
		if (own != "" && t != own) || (d.Tenant != "" && t != d.Tenant) || (d.Tool != "" && e.Tool != d.Tool) || (d.Decision != "" && e.Decision != d.Decision) {
			return nil
		}
		ring = append(ring, auditRow{Entry: e, When: when(e.Time, now), Tenant: t})
		if len(ring) > 2*auditRows {
			ring = append(ring[:0], ring[len(ring)-auditRows:]...)
		}
		return nil
	})
	if err != nil && d.Note == "" {
		d.Note = err.Error()
	}
	if len(ring) > auditRows {
		ring = ring[len(ring)-auditRows:]
	}
	slices.Reverse(ring)
	d.Entries = ring
	c.render(w, http.StatusOK, "audit", c.page(sess, "audit", "Audit log", d))
}

func (c *Console) blocklistPage(w http.ResponseWriter, r *http.Request, sess *session) {
	var rows any
	if c.Blocklist != nil {
		rows = c.Blocklist()
	}
	c.render(w, http.StatusOK, "blocklist", c.page(sess, "blocklist", "Block list", rows))
}

func (c *Console) poolPage(w http.ResponseWriter, r *http.Request, sess *session) {
	var rows any
	if c.Pool != nil {
		rows = c.Pool()
	}
	c.render(w, http.StatusOK, "pool", c.page(sess, "pool", "Pool", rows))
}

type cacheRow struct {
	Language, Key, Size, Used, Created string
	Entries                            int
	List                               string
}

func (c *Console) cachesPage(w http.ResponseWriter, r *http.Request, sess *session) {
	var rows []cacheRow
	note := ""
	if c.Caches != nil {
		list, err := c.Caches(r.Context())
		if err != nil {
			note = err.Error()
		}
		now := time.Now()
		for _, k := range list {
			size := "?"
			if k.SizeBytes >= 0 {
				size = humanBytes(k.SizeBytes)
			}
			rows = append(rows, cacheRow{Language: k.Language, Key: shortID(k.Key), Size: size, Used: when(k.LastUsed, now),
				Created: when(k.CreatedAt, now), Entries: len(k.List), List: trim(strings.Join(k.List, " "), 300)})
		}
	}
	c.render(w, http.StatusOK, "caches", c.page(sess, "caches", "Dependency caches", struct {
		Rows []cacheRow
		Note string
	}{rows, note}))
}

// Formatting helpers.

func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

func shortID(id string) string {
	if len(id) > 8 {
		return id[:8]
	}
	return id
}

func trim(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !isRuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

func isRuneStart(b byte) bool { return b&0xC0 != 0x80 }

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i] + " …"
	}
	return s
}

// when is a time for a list: the clock today, the date before.
func when(t, now time.Time) string {
	if t.IsZero() {
		return ""
	}
	t = t.Local()
	if y, m, d := t.Date(); y == now.Year() && m == now.Month() && d == now.Day() {
		return t.Format("15:04:05")
	}
	return t.Format("2006-01-02 15:04")
}

func stamp(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.Local().Format("2006-01-02 15:04:05.000 MST")
}

// cleanRel makes a browsing path relative to /workspace ("" for its root);
// the file helper refuses whatever would still leave it.
func cleanRel(p string) string {
	p = path.Clean("/" + trim(p, 1024))
	return strings.TrimPrefix(p, "/")
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
