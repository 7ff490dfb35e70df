package proto

// File helpers: `sandboxer-supervisor fs read|write|list ...`, run by the
// server as a plain exec (uid 1000) in a workspace container, so every file
// operation of write_file, read_file and list_files happens inside the
// container and never on the host. Paths are relative to /workspace and are
// opened with openat2(RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS): a symbolic link
// anywhere in a path is refused. The helper writes one FSResult as JSON on
// stdout and exits 0, or 1 with Error set.
//
//	fs read  <path> <offset_line> <limit_lines> <max_bytes>
//	fs write <path> <mode|-> <append:0|1> <max_bytes>   (content on stdin)
//	fs list  <path> <recursive:0|1> <glob|-> <max_entries>
const FSCommand = "fs"

// FSEntry is one directory entry of fs list.
type FSEntry struct {
	Path  string `json:"path"` // relative to /workspace
	Name  string `json:"name"`
	Type  string `json:"type"` // file, dir, symlink, other
	Size  int64  `json:"size"`
	Mode  string `json:"mode"` // octal permission bits, e.g. "0644"
	MTime string `json:"mtime"`
	// Target is a symbolic link's target (never followed).
	Target string `json:"target,omitempty"`
}

// FSResult is what an fs helper reports.
type FSResult struct {
	Error string `json:"error,omitempty"`
	// ErrorKind classifies Error: not_found, symlink, escape, is_dir,
	// not_dir, permission, too_large, invalid, io.
	ErrorKind string `json:"error_kind,omitempty"`

	// read
	Content   []byte `json:"content,omitempty"`
	Size      int64  `json:"size,omitempty"`       // whole file's size (read, write)
	Truncated bool   `json:"truncated,omitempty"`  // read: cut at max_bytes; list: cut at max_entries
	FirstLine int    `json:"first_line,omitempty"` // read with a line range: first line returned (1-based)
	Lines     int    `json:"lines,omitempty"`      // read with a line range: lines returned
	MoreLines bool   `json:"more_lines,omitempty"` // read with a line range: lines follow the range

	// write
	Written int64  `json:"written,omitempty"`
	Mode    string `json:"mode,omitempty"`

	// list
	Entries []FSEntry `json:"entries,omitempty"`
}

// WatchCommand follows changes under a path of /workspace until its stdin
// closes: `sandboxer-supervisor watch <path>`. It watches with inotify the
// path (a file or a directory with, up to MaxWatchDirs, its
// subdirectories, new ones too), opened as fs opens paths, and writes one
// WatchEvent as a JSON line: Ready once it watches, then a batch of changed
// paths at most every WatchCoalesce, then Gone if the path itself went.
const WatchCommand = "watch"

// MaxWatchDirs bounds the directories one watch follows; WatchBatch the
// paths one event names (More says some were left out: read again).
const (
	MaxWatchDirs = 1024
	WatchBatch   = 100
)

// WatchCoalesce is the least time between two events of one watch, in ms.
const WatchCoalesce = 100

// WatchEvent is one line of a watch.
type WatchEvent struct {
	Ready     bool     `json:"ready,omitempty"`
	Paths     []string `json:"paths,omitempty"` // relative to /workspace
	More      bool     `json:"more,omitempty"`
	Gone      bool     `json:"gone,omitempty"`
	Error     string   `json:"error,omitempty"`
	ErrorKind string   `json:"error_kind,omitempty"`
}

// MetricsCommand samples the container's own cgroup:
// `sandboxer-supervisor metrics`. It reads the CPU time twice,
// MetricsSampleMS apart, and writes one Metrics as JSON.
const MetricsCommand = "metrics"

// MetricsSampleMS is the span over which metrics measures CPU use.
const MetricsSampleMS = 200

// Metrics is what the container's cgroup says; a figure the cgroup does
// not show is -1.
type Metrics struct {
	CPUUsedCores float64 `json:"cpu_used_cores"` // cores busy over the sample (1.5: one and a half)
	MemUsed      int64   `json:"mem_used"`       // bytes charged to the cgroup, page cache included
	MemCache     int64   `json:"mem_cache"`      // of which page cache
	MemLimit     int64   `json:"mem_limit"`      // the cgroup's memory limit (-1: none)
}
