package proto

// Project helpers, run by the server as plain execs of the supervisor (never
// jobs), for imports, workspace_changes and expose_port:
//
//	scan DIR     walk DIR without following links; one ScanResult on stdout
//	tar DIR      DIR as a tar stream on stdout, read with the helper's own
//	             rights (uid 1000); one TarResult on stderr at the end
//	untar DIR    a tar stream on stdin written under DIR (links as links,
//	             nothing written outside DIR); one UntarResult on stdout
//	changes      ChangesRequest on stdin; one ChangesResult on stdout
//	relay PORT   pipe stdin/stdout to 127.0.0.1:PORT inside the container
const (
	ScanCommand    = "scan"
	TarCommand     = "tar"
	UntarCommand   = "untar"
	ChangesCommand = "changes"
	RelayCommand   = "relay"
)

// TarResult is what tar left out, or why it failed.
type TarResult struct {
	Error   string        `json:"error,omitempty"`
	Skipped []SpecialFile `json:"skipped,omitempty"` // the first MaxScanSpecial
	// SkippedCount counts every path left out.
	SkippedCount int `json:"skipped_count,omitempty"`
}

// Skip lists f as left out (the first MaxScanSpecial; all are counted).
func (r *TarResult) Skip(f SpecialFile) {
	r.SkippedCount++
	if len(r.Skipped) < MaxScanSpecial {
		r.Skipped = append(r.Skipped, f)
	}
}

// Skip lists f as left out (the first MaxScanSpecial; all are counted).
func (r *ScanResult) Skip(f SpecialFile) {
	r.SpecialCount++
	if len(r.Special) < MaxScanSpecial {
		r.Special = append(r.Special, f)
	}
}

// UntarResult is what untar wrote, or why it failed.
type UntarResult struct {
	Error string `json:"error,omitempty"`
	Files int    `json:"files"`
	Dirs  int    `json:"dirs"`
	Links int    `json:"links"`
	Bytes int64  `json:"bytes"`
}

// SpecialFile is a path an import skips: a socket, FIFO or device, or what
// the sandbox user may not read.
type SpecialFile struct {
	Path   string `json:"path"`
	Type   string `json:"type"`             // socket, fifo, device, unreadable
	Reason string `json:"reason,omitempty"` // why it was left out
}

// ScanResult sums up a tree before it is copied.
type ScanResult struct {
	Error   string        `json:"error,omitempty"`
	Files   int           `json:"files"`
	Dirs    int           `json:"dirs"`
	Links   int           `json:"links"`
	Bytes   int64         `json:"bytes"` // regular files' sizes
	Special []SpecialFile `json:"special,omitempty"`
	// SpecialCount counts every special file; Special lists the first ones.
	SpecialCount int `json:"special_count,omitempty"`
}

// MaxScanSpecial bounds ScanResult.Special.
const MaxScanSpecial = 100

// BaselineEntry is one path of an import's baseline (paths relative to
// /workspace, slash-separated, no leading "./").
type BaselineEntry struct {
	Path   string `json:"p"`
	Type   string `json:"t"` // file, dir, symlink
	Mode   uint32 `json:"m"` // permission bits
	Size   int64  `json:"s,omitempty"`
	SHA256 string `json:"h,omitempty"`  // file: hex of its content
	Target string `json:"l,omitempty"`  // symlink: its target, never followed
	MTime  int64  `json:"mt,omitempty"` // modification time, Unix nanoseconds
}

// ChangesRequest asks what differs from Baseline under /workspace.
type ChangesRequest struct {
	Baseline []BaselineEntry `json:"baseline"`
	// Exclude are paths (with all below them) that are never reported:
	// the caches the server keeps on the workspace's volume.
	Exclude []string `json:"exclude"`
	// MaxFileBytes is the largest file whose content is sent; MaxTotalBytes
	// bounds all content sent. Larger or later files are named only.
	MaxFileBytes  int64 `json:"max_file_bytes"`
	MaxTotalBytes int64 `json:"max_total_bytes"`
}

// Change is one path that differs from the baseline.
type Change struct {
	Path   string `json:"path"`
	Change string `json:"change"` // added, modified, deleted
	Type   string `json:"type"`   // file, dir, symlink (the new one; the old one when deleted)
	Mode   uint32 `json:"mode,omitempty"`
	Size   int64  `json:"size,omitempty"`
	Target string `json:"target,omitempty"` // symlink
	// Content is a text file's new content, unless Binary or Omitted.
	Content []byte `json:"content,omitempty"`
	Binary  bool   `json:"binary,omitempty"`
	// Omitted: the content was not sent (too large, past the total budget,
	// or unreadable: Note says which).
	Omitted bool   `json:"omitted,omitempty"`
	Note    string `json:"note,omitempty"`
}

// ChangesResult is what the changes helper reports.
type ChangesResult struct {
	Error   string   `json:"error,omitempty"`
	Changes []Change `json:"changes"`
}
