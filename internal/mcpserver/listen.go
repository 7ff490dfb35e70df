package mcpserver

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/sandboxer/sandboxer/internal/output"
	"github.com/sandboxer/sandboxer/internal/record"
	"github.com/sandboxer/sandboxer/internal/tenant"
)

// subscriptions/listen (the 2026-07-28 revision, SEP-2575): one long
// request whose stream carries only the notifications the client opted in
// to, each tagged with the request's id as its subscriptionId. It is
// answered here, in front of mcp-go (whose listen knows only its own
// session store), on stdio (wire) and over HTTP (an SSE response,
// frontHTTP), so that every subscription is the caller's tenant's:
//
//   - resourceSubscriptions: job://{id}/output (the output grew: read it
//     again from your cursor), job://{id} (its status changed) and
//     workspace://{name}/{path} (a file, or anything under a directory,
//     changed: watch.go);
//   - taskIds (the tasks extension): notifications/tasks with the detailed
//     task, as tasks/get answers it, whenever its status changes.
//
// A URI or task the tenant does not own, or that does not exist, is left
// out of the acknowledgement (so the client learns what it got, and
// nothing about other tenants). Updates are coalesced: at most one per
// subscription per listenCoalesce, each saying "read again", so a slow
// client loses nothing. resourcesListChanged is honoured (resources/list
// lists the tenant's newest jobs: a new job changes it); the tool and
// prompt lists of this server do not change while it runs, so their flags
// are not.

const (
	// maxListenSubscriptions bounds resourceSubscriptions plus taskIds of
	// one listen.
	maxListenSubscriptions = 64
	// maxListensPerTenant bounds the listen streams a tenant holds open.
	maxListensPerTenant = 16
	// listenCoalesce is the least time between two updates of one
	// subscription.
	listenCoalesce = 100 * time.Millisecond
	// listenPoll is how often a job's or task's status is looked at.
	listenPoll = time.Second
)

// listenFilter is a listen's notifications member.
type listenFilter struct {
	ToolsListChanged      bool     `json:"toolsListChanged,omitempty"`
	PromptsListChanged    bool     `json:"promptsListChanged,omitempty"`
	ResourcesListChanged  bool     `json:"resourcesListChanged,omitempty"`
	ResourceSubscriptions []string `json:"resourceSubscriptions,omitempty"`
	TaskIDs               []string `json:"taskIds,omitempty"`
}

// listens counts the open listen streams by tenant.
type listens struct {
	mu   sync.Mutex
	open map[string]int
}

func (l *listens) take(owner string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.open == nil {
		l.open = map[string]int{}
	}
	if l.open[owner] >= maxListensPerTenant {
		return false
	}
	l.open[owner]++
	return true
}

func (l *listens) give(owner string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.open[owner]--; l.open[owner] <= 0 {
		delete(l.open, owner)
	}
}

// sendFunc writes one notification on a listen's stream; an error ends the
// stream (the client is gone).
type sendFunc func(method string, params map[string]any) error

// listen serves one subscriptions/listen until ctx ends: it checks the
// filter, acknowledges what it honours and follows it. A nil error after
// the acknowledgement means the stream ended; the caller answers the
// request (graceful close) or not (the client cancelled it).
func (s *Server) listen(ctx context.Context, id json.RawMessage, params json.RawMessage, send sendFunc) *rpcError {
	var p struct {
		Notifications *listenFilter `json:"notifications"`
	}
	if len(params) == 0 {
		params = json.RawMessage("{}")
	}
	if err := json.Unmarshal(params, &p); err != nil {
		return invalidParams("subscriptions/listen: params: %v", err)
	}
	if p.Notifications == nil {
		return invalidParams("subscriptions/listen: params.notifications is required (an object: resourceSubscriptions, taskIds, toolsListChanged …)")
	}
	want := *p.Notifications
	if n := len(want.ResourceSubscriptions) + len(want.TaskIDs); n > maxListenSubscriptions {
		return invalidParams("subscriptions/listen: params.notifications names %d resources and tasks; at most %d in one listen", n, maxListenSubscriptions)
	}
	if len(want.TaskIDs) > 0 && !eraOf(params).tasksExt {
		return missingTasksExtension("subscriptions/listen with notifications.taskIds")
	}
	owner := tenant.Owner(ctx)
	if !s.listens.take(owner) {
		return &rpcError{code: mcp.INVALID_REQUEST, msg: fmt.Sprintf(
			"subscriptions/listen: %d listen streams are open for this tenant, the most at once; close one first", maxListensPerTenant)}
	}
	defer s.listens.give(owner)

	subID := append(json.RawMessage(nil), id...)
	tag := func(params map[string]any) map[string]any {
		params["_meta"] = map[string]any{mcp.MetaKeySubscriptionID: subID}
		return params
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var sendMu sync.Mutex
	emit := func(method string, params map[string]any) {
		sendMu.Lock()
		defer sendMu.Unlock()
		if ctx.Err() == nil && send(method, tag(params)) != nil {
			cancel()
		}
	}

	var honoured listenFilter
	var watchers []func()
	for _, uri := range dedupe(want.ResourceSubscriptions) {
		if w := s.resourceWatcher(ctx, uri, emit); w != nil {
			honoured.ResourceSubscriptions = append(honoured.ResourceSubscriptions, uri)
			watchers = append(watchers, w)
		}
	}
	if want.ResourcesListChanged && s.deps.Jobs != nil {
		// resources/list lists the tenant's newest jobs: a new one changes it.
		honoured.ResourcesListChanged = true
		newest := s.newestJob(ctx)
		watchers = append(watchers, func() { s.watchJobList(ctx, newest, emit) })
	}
	for _, tid := range dedupe(want.TaskIDs) {
		if t, rerr := s.task(ctx, tid); rerr == nil {
			honoured.TaskIDs = append(honoured.TaskIDs, tid)
			watchers = append(watchers, func() { s.watchTask(ctx, t, emit) })
		}
	}
	emit(string(mcp.MethodNotificationSubscriptionsAcknowledged), map[string]any{"notifications": honoured})
	if len(watchers) == 0 {
		return nil // nothing to follow: the stream ends at once
	}
	var wg sync.WaitGroup
	for _, w := range watchers {
		wg.Go(w)
	}
	<-ctx.Done()
	wg.Wait()
	return nil
}

// listenResult is the answer that ends a listen stream gracefully.
func listenResult(id json.RawMessage) map[string]any {
	return map[string]any{"resultType": string(mcp.ResultTypeComplete),
		"_meta": map[string]any{mcp.MetaKeySubscriptionID: id}}
}

func dedupe(in []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, v := range in {
		if !seen[v] {
			seen[v] = true
			out = append(out, v)
		}
	}
	return out
}

// resourceWatcher is the follower of one resource URI the tenant may
// subscribe to; nil for any other.
func (s *Server) resourceWatcher(ctx context.Context, uri string, emit func(string, map[string]any)) func() {
	updated := func() { emit(string(mcp.MethodNotificationResourceUpdated), map[string]any{"uri": uri}) }
	if rest, ok := strings.CutPrefix(uri, "job://"); ok {
		id, what, _ := strings.Cut(rest, "/")
		if what != "" && what != "output" {
			return nil
		}
		rec, err := s.deps.Jobs.Get(ctx, id)
		if err != nil {
			return nil
		}
		if what == "output" {
			past, err := s.deps.Jobs.Size(ctx, id, output.Both) // as of the acknowledgement
			if err != nil {
				return nil
			}
			return func() { s.watchOutput(ctx, id, past, updated) }
		}
		return func() { s.watchStatus(ctx, rec, updated) }
	}
	if rest, ok := strings.CutPrefix(uri, "workspace://"); ok && s.deps.Workspaces != nil {
		name, path, _ := strings.Cut(rest, "/")
		if path == "" {
			path = "."
		}
		if _, err := s.deps.Workspaces.Get(ctx, name); err != nil {
			return nil
		}
		// The watch begins before the acknowledgement, so a path that
		// cannot be watched is not acknowledged.
		changes := make(chan struct{}, 1)
		done, err := s.deps.Workspaces.Watch(ctx, name, path, func([]string, bool) {
			select {
			case changes <- struct{}{}:
			default: // one is pending: it says the same
			}
		})
		if err != nil {
			if s.logf != nil {
				s.logf("subscriptions/listen %s: %v", uri, err)
			}
			return nil
		}
		return func() { coalesce(ctx, changes, done, updated) }
	}
	return nil
}

// coalesce says "updated" for changes, at most once per listenCoalesce,
// until done yields or ctx ends.
func coalesce(ctx context.Context, changes <-chan struct{}, done <-chan error, updated func()) {
	for {
		select {
		case <-changes:
			updated()
			if !sleep(ctx, listenCoalesce) {
				return
			}
		case <-done:
			return
		case <-ctx.Done():
			return
		}
	}
}

// watchOutput says "updated" each time a job's output grows, until the job
// has ended.
func (s *Server) watchOutput(ctx context.Context, id string, past int64, updated func()) {
	for {
		size, ended, err := s.deps.Jobs.WaitOutput(ctx, id, past)
		if err != nil {
			return
		}
		if size > past {
			updated()
			past = size
		}
		if ended {
			return
		}
		if !sleep(ctx, listenCoalesce) {
			return
		}
	}
}

// newestJob is the id of the caller's newest job ("" for none).
func (s *Server) newestJob(ctx context.Context) string {
	jobs, _, err := s.deps.Jobs.List(ctx, record.ListFilter{Limit: 1})
	if err != nil || len(jobs) == 0 {
		return ""
	}
	return jobs[0].ID
}

// watchJobList sends notifications/resources/list_changed each time the
// caller's newest job changes (a job of another tenant wakes it, and it
// says nothing).
func (s *Server) watchJobList(ctx context.Context, newest string, emit func(string, map[string]any)) {
	for {
		created := s.deps.Jobs.Created()
		if n := s.newestJob(ctx); n != newest {
			newest = n
			emit(string(mcp.MethodNotificationResourcesListChanged), map[string]any{})
			if !sleep(ctx, listenCoalesce) {
				return
			}
			continue
		}
		select {
		case <-created:
		case <-ctx.Done():
			return
		}
	}
}

// watchStatus says "updated" each time a job's status changes, until it
// has ended.
func (s *Server) watchStatus(ctx context.Context, rec *record.Job, updated func()) {
	last := rec.Status
	for !record.Finished(last) {
		next, err := s.deps.Jobs.Wait(ctx, rec.ID, listenPoll)
		if err != nil || ctx.Err() != nil {
			return
		}
		if next.Status != last {
			updated()
			last = next.Status
		}
	}
}

// watchTask sends notifications/tasks with the detailed task each time its
// status changes, until it has ended.
func (s *Server) watchTask(ctx context.Context, t *record.Task, emit func(string, map[string]any)) {
	last := mcp.TaskStatus("")
	for {
		if next, err := s.deps.Jobs.Task(ctx, t.ID); err == nil {
			t = next
		}
		if d := s.detailedTask(ctx, t, ""); d.Status != last {
			last = d.Status
			var params map[string]any
			if b, err := json.Marshal(d); err == nil && json.Unmarshal(b, &params) == nil {
				emit(notificationTasks, params)
			}
		}
		if last.IsTerminal() {
			return
		}
		if t.JobID != "" {
			if _, err := s.deps.Jobs.Wait(ctx, t.JobID, listenPoll); err != nil {
				return
			}
		} else if !sleep(ctx, listenPoll) {
			return
		}
		if ctx.Err() != nil {
			return
		}
	}
}

// notificationTasks is the tasks extension's status notification.
const notificationTasks = "notifications/tasks"

// sleep waits d unless ctx ends first (false).
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
