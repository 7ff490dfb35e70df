package e2b

import (
	"context"
	"fmt"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sandboxer/sandboxer/images"
	"github.com/sandboxer/sandboxer/internal/e2b/envd/filesystem"
	"github.com/sandboxer/sandboxer/internal/e2b/envd/filesystem/filesystemconnect"
	"github.com/sandboxer/sandboxer/internal/record"
	"github.com/sandboxer/sandboxer/internal/workspace"
)

// Workspaces are the workspace manager's parts the E2B API uses beside the
// tools: a watch of a path (watchDir), a pause (pause), a record (state).
type Workspaces interface {
	Watch(ctx context.Context, name, rel string, changed func(paths []string, more bool)) (<-chan error, error)
	PauseNow(ctx context.Context, name string) error
	Get(ctx context.Context, name string) (*record.Workspace, error)
	Metrics(ctx context.Context, name string) (*workspace.Metrics, error)
}

// fsService is envd's Filesystem service: list_files describes entries;
// mkdir, mv and rm run as run_command in the workspace; a watch is the
// supervisor's (the listen streams' own).
type fsService struct {
	filesystemconnect.UnimplementedFilesystemHandler
	s *Server
}

// e2bPath shows a path of the workspace as E2B's: under its home, which
// every built-in image links to /workspace.
func e2bPath(rel string) string {
	if rel == "." || rel == "" {
		return images.HomeUser
	}
	return images.HomeUser + "/" + rel
}

func fsPath(p string) (string, error) {
	rel, err := workspacePath(p)
	if err != nil {
		return "", connect.NewError(connect.CodeInvalidArgument, err)
	}
	return rel, nil
}

// entryOf is one list_files entry as E2B's EntryInfo.
func entryOf(e map[string]any) *filesystem.EntryInfo {
	str := func(k string) string { v, _ := e[k].(string); return v }
	info := &filesystem.EntryInfo{Name: str("name"), Path: e2bPath(str("path")), Owner: "user", Group: "user"}
	if size, ok := e["size"].(float64); ok {
		info.Size = int64(size)
	}
	switch str("type") {
	case "file":
		info.Type = filesystem.FileType_FILE_TYPE_FILE
	case "dir":
		info.Type = filesystem.FileType_FILE_TYPE_DIRECTORY
	case "symlink":
		info.Type = filesystem.FileType_FILE_TYPE_SYMLINK
		t := str("target")
		info.SymlinkTarget = &t
	}
	if m, err := strconv.ParseUint(str("mode"), 8, 32); err == nil {
		info.Mode = uint32(m)
		info.Permissions = permissions(info.Type, uint32(m))
	}
	if t, err := time.Parse(time.RFC3339Nano, str("mtime")); err == nil {
		info.ModifiedTime = timestamppb.New(t)
	}
	return info
}

func permissions(t filesystem.FileType, mode uint32) string {
	b := []byte("-rwxrwxrwx")
	if t == filesystem.FileType_FILE_TYPE_DIRECTORY {
		b[0] = 'd'
	}
	for i := 0; i < 9; i++ {
		if mode&(1<<(8-i)) == 0 {
			b[i+1] = '-'
		}
	}
	return string(b)
}

// list lists a directory of the sandbox's workspace.
func (f *fsService) list(ctx context.Context, rel string, recursive bool, glob string) ([]*filesystem.EntryInfo, error) {
	args := map[string]any{"workspace": sandboxOf(ctx).ID, "path": rel, "recursive": recursive}
	if glob != "" {
		args["glob"] = glob
	}
	out, err := f.s.tool(ctx, "list_files", args)
	if err != nil {
		code := connect.CodeInvalidArgument
		if strings.Contains(err.Error(), "no such file") {
			code = connect.CodeNotFound
		}
		return nil, connect.NewError(code, err)
	}
	var entries []*filesystem.EntryInfo
	list, _ := out["entries"].([]any)
	for _, e := range list {
		if m, ok := e.(map[string]any); ok {
			entries = append(entries, entryOf(m))
		}
	}
	return entries, nil
}

// stat describes one path: found in its directory's listing.
func (f *fsService) stat(ctx context.Context, rel string) (*filesystem.EntryInfo, error) {
	if rel == "." {
		return &filesystem.EntryInfo{Name: "user", Type: filesystem.FileType_FILE_TYPE_DIRECTORY, Path: images.HomeUser, Mode: 0o755,
			Permissions: "drwxr-xr-x", Owner: "user", Group: "user"}, nil
	}
	entries, err := f.list(ctx, path.Dir(rel), false, "")
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		if e.Path == e2bPath(rel) {
			return e, nil
		}
	}
	return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("%s: no such file or directory", e2bPath(rel)))
}

// existing says which of paths exist, listing each of their directories
// once (a batch of a watch names many paths of few directories).
func (f *fsService) existing(ctx context.Context, paths []string) map[string]bool {
	out := map[string]bool{}
	listed := map[string]bool{}
	for _, p := range paths {
		if p == "." {
			out[p] = true
			continue
		}
		dir := path.Dir(p)
		if listed[dir] {
			continue
		}
		listed[dir] = true
		entries, _ := f.list(ctx, dir, false, "") // a directory gone: its paths are gone
		for _, e := range entries {
			out[strings.TrimPrefix(strings.TrimPrefix(e.Path, images.HomeUser), "/")] = true
		}
	}
	return out
}

// shell runs a command in the sandbox's workspace to its end.
func (f *fsService) shell(ctx context.Context, command string) error {
	out, err := f.s.tool(ctx, "run_command", map[string]any{"workspace": sandboxOf(ctx).ID, "command": command})
	if err != nil {
		return connect.NewError(connect.CodeFailedPrecondition, err)
	}
	if code, _ := out["exit_code"].(float64); code != 0 || out["status"] != "completed" {
		msg, _ := out["stderr"].(string)
		return connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("%s: %s", command, strings.TrimSpace(msg)))
	}
	return nil
}

func (f *fsService) Stat(ctx context.Context, req *connect.Request[filesystem.StatRequest]) (*connect.Response[filesystem.StatResponse], error) {
	rel, err := fsPath(req.Msg.GetPath())
	if err != nil {
		return nil, err
	}
	e, err := f.stat(ctx, rel)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&filesystem.StatResponse{Entry: e}), nil
}

func (f *fsService) ListDir(ctx context.Context, req *connect.Request[filesystem.ListDirRequest]) (*connect.Response[filesystem.ListDirResponse], error) {
	rel, err := fsPath(req.Msg.GetPath())
	if err != nil {
		return nil, err
	}
	depth := max(req.Msg.GetDepth(), 1)
	entries, err := f.list(ctx, rel, depth > 1, "")
	if err != nil {
		return nil, err
	}
	base := strings.Count(e2bPath(rel), "/")
	res := &filesystem.ListDirResponse{}
	for _, e := range entries {
		if uint32(strings.Count(e.Path, "/")-base) <= depth {
			res.Entries = append(res.Entries, e)
		}
	}
	return connect.NewResponse(res), nil
}

func (f *fsService) MakeDir(ctx context.Context, req *connect.Request[filesystem.MakeDirRequest]) (*connect.Response[filesystem.MakeDirResponse], error) {
	rel, err := fsPath(req.Msg.GetPath())
	if err != nil {
		return nil, err
	}
	if _, err := f.stat(ctx, rel); err == nil {
		return nil, connect.NewError(connect.CodeAlreadyExists, fmt.Errorf("%s exists", e2bPath(rel)))
	}
	if err := f.shell(ctx, "mkdir -p -- "+shellQuote(rel)); err != nil {
		return nil, err
	}
	e, err := f.stat(ctx, rel)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&filesystem.MakeDirResponse{Entry: e}), nil
}

func (f *fsService) Move(ctx context.Context, req *connect.Request[filesystem.MoveRequest]) (*connect.Response[filesystem.MoveResponse], error) {
	src, err := fsPath(req.Msg.GetSource())
	if err != nil {
		return nil, err
	}
	dst, err := fsPath(req.Msg.GetDestination())
	if err != nil {
		return nil, err
	}
	if err := f.shell(ctx, "mv -- "+shellQuote(src)+" "+shellQuote(dst)); err != nil {
		return nil, err
	}
	e, err := f.stat(ctx, dst)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&filesystem.MoveResponse{Entry: e}), nil
}

func (f *fsService) Remove(ctx context.Context, req *connect.Request[filesystem.RemoveRequest]) (*connect.Response[filesystem.RemoveResponse], error) {
	rel, err := fsPath(req.Msg.GetPath())
	if err != nil {
		return nil, err
	}
	if rel == "." {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("the workspace's root cannot be removed"))
	}
	if err := f.shell(ctx, "rm -rf -- "+shellQuote(rel)); err != nil {
		return nil, err
	}
	return connect.NewResponse(&filesystem.RemoveResponse{}), nil
}

// WatchDir streams the changes under a directory: the supervisor's watch,
// each changed path an event (create, write or remove, as the path is then).
func (f *fsService) WatchDir(ctx context.Context, req *connect.Request[filesystem.WatchDirRequest], stream *connect.ServerStream[filesystem.WatchDirResponse]) error {
	run, err := f.watch(ctx, req.Msg.GetPath(), req.Msg.GetRecursive(), func(ev *filesystem.FilesystemEvent) error {
		return stream.Send(&filesystem.WatchDirResponse{Event: &filesystem.WatchDirResponse_Filesystem{Filesystem: ev}})
	})
	if err != nil {
		return err
	}
	if err := stream.Send(&filesystem.WatchDirResponse{Event: &filesystem.WatchDirResponse_Start{Start: &filesystem.WatchDirResponse_StartEvent{}}}); err != nil {
		return err
	}
	return run()
}

// watch begins following the changes under an E2B path of ctx's sandbox;
// run then hands each to emit as an E2B event until ctx ends, the path
// goes, or emit fails.
func (f *fsService) watch(ctx context.Context, e2bPath string, recursive bool, emit func(*filesystem.FilesystemEvent) error) (run func() error, err error) {
	if f.s.workspaces == nil {
		return nil, connect.NewError(connect.CodeUnimplemented, fmt.Errorf("this server has no workspaces to watch"))
	}
	rel, err := fsPath(e2bPath)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	changes := make(chan []string, 64)
	done, err := f.s.workspaces.Watch(ctx, sandboxOf(ctx).ID, rel, func(paths []string, _ bool) {
		select {
		case changes <- paths:
		default: // the reader is behind: a later batch says as much
		}
	})
	if err != nil {
		cancel()
		return nil, connect.NewError(connect.CodeNotFound, err)
	}
	return func() error {
		defer cancel()
		seen := map[string]bool{}
		for {
			select {
			case <-ctx.Done():
				return nil
			case <-done:
				return nil
			case paths := <-changes:
				paths = slices.DeleteFunc(paths, func(p string) bool {
					return !recursive && strings.Contains(strings.TrimPrefix(strings.TrimPrefix(p, rel), "/"), "/")
				})
				exists := f.existing(ctx, paths)
				for _, p := range paths {
					name := strings.TrimPrefix(strings.TrimPrefix(p, rel), "/")
					typ := filesystem.EventType_EVENT_TYPE_WRITE
					if !exists[p] {
						typ = filesystem.EventType_EVENT_TYPE_REMOVE
					} else if !seen[p] {
						typ = filesystem.EventType_EVENT_TYPE_CREATE
					}
					seen[p] = typ != filesystem.EventType_EVENT_TYPE_REMOVE
					if err := emit(&filesystem.FilesystemEvent{Name: name, Type: typ}); err != nil {
						return err
					}
				}
			}
		}
	}, nil
}

// Bounds of the polled watchers (CreateWatcher): how many a sandbox keeps,
// the events one holds between polls (the oldest go first), and how long
// one lives without a poll.
const (
	maxWatchers      = 16
	maxWatcherEvents = 1000
	watcherIdle      = 10 * time.Minute
)

// watcher is a polled watch: its events since the last poll.
type watcher struct {
	cancel context.CancelFunc
	idle   *time.Timer

	mu     sync.Mutex
	events []*filesystem.FilesystemEvent
}

// CreateWatcher begins a watch whose events GetWatcherEvents collects.
func (f *fsService) CreateWatcher(ctx context.Context, req *connect.Request[filesystem.CreateWatcherRequest]) (*connect.Response[filesystem.CreateWatcherResponse], error) {
	sb := sandboxOf(ctx)
	sb.mu.Lock()
	n := len(sb.watchers)
	sb.mu.Unlock()
	if n >= maxWatchers {
		return nil, connect.NewError(connect.CodeResourceExhausted, fmt.Errorf("sandbox %s has %d watchers, the most it keeps: remove one first", sb.ID, maxWatchers))
	}
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx)) // it outlives this request
	wt := &watcher{cancel: cancel}
	run, err := f.watch(wctx, req.Msg.GetPath(), req.Msg.GetRecursive(), func(ev *filesystem.FilesystemEvent) error {
		wt.mu.Lock()
		defer wt.mu.Unlock()
		if len(wt.events) == maxWatcherEvents {
			wt.events = wt.events[1:]
		}
		wt.events = append(wt.events, ev)
		return nil
	})
	if err != nil {
		cancel()
		return nil, err
	}
	id := "w-" + randomHex(8)
	wt.idle = time.AfterFunc(watcherIdle, func() { sb.removeWatcher(id) })
	sb.mu.Lock()
	sb.watchers[id] = wt
	sb.mu.Unlock()
	go func() {
		_ = run()
	}()
	return connect.NewResponse(&filesystem.CreateWatcherResponse{WatcherId: id}), nil
}

// GetWatcherEvents hands over a watcher's events since the last call.
func (f *fsService) GetWatcherEvents(ctx context.Context, req *connect.Request[filesystem.GetWatcherEventsRequest]) (*connect.Response[filesystem.GetWatcherEventsResponse], error) {
	sb := sandboxOf(ctx)
	sb.mu.Lock()
	wt := sb.watchers[req.Msg.GetWatcherId()]
	sb.mu.Unlock()
	if wt == nil {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("watcher %q not found", truncate(req.Msg.GetWatcherId(), 40)))
	}
	wt.idle.Reset(watcherIdle)
	wt.mu.Lock()
	events := wt.events
	wt.events = nil
	wt.mu.Unlock()
	return connect.NewResponse(&filesystem.GetWatcherEventsResponse{Events: events}), nil
}

// RemoveWatcher ends a watcher.
func (f *fsService) RemoveWatcher(ctx context.Context, req *connect.Request[filesystem.RemoveWatcherRequest]) (*connect.Response[filesystem.RemoveWatcherResponse], error) {
	if !sandboxOf(ctx).removeWatcher(req.Msg.GetWatcherId()) {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("watcher %q not found", truncate(req.Msg.GetWatcherId(), 40)))
	}
	return connect.NewResponse(&filesystem.RemoveWatcherResponse{}), nil
}

// removeWatcher ends watcher id, if the sandbox has it.
func (sb *running) removeWatcher(id string) bool {
	sb.mu.Lock()
	wt := sb.watchers[id]
	delete(sb.watchers, id)
	sb.mu.Unlock()
	if wt == nil {
		return false
	}
	wt.idle.Stop()
	wt.cancel()
	return true
}
