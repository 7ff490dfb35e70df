package program

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandboxer/sandboxer/internal/supervisor/proto"
)

// A fresh sandbox's go commands are compiled again, after the job, by a
// trusted builder that writes the tenant's shared build cache (the server's
// internal/gobuild). For that the builder needs what each go command built:
// the GOCACHEPROG (this program, started by the go command) records the
// command's directory and arguments, and at the end the supervisor sends
// each module's source with the Exit report. All of it comes from the job,
// so all of it is hostile: the server checks it, and the builder only
// compiles (it never runs what it builds).

// goBuildRecord is one line of the GoBuildsEnv file.
type goBuildRecord struct {
	Dir  string   `json:"dir"`
	Args []string `json:"args"`
}

// maxGoBuildsFile bounds the GoBuildsEnv file, as written and as read.
const maxGoBuildsFile = 64 << 10

// goBuildCollectTime bounds the collection at the job's end.
const goBuildCollectTime = 2 * time.Second

// recordGoBuild appends the go command that started this GOCACHEPROG (its
// parent) to the file GoBuildsEnv names, when set.
func recordGoBuild() {
	path := os.Getenv(proto.GoBuildsEnv)
	if path == "" || !filepath.IsAbs(path) {
		return
	}
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", os.Getppid()))
	if err != nil {
		return
	}
	args := goCommandArgs(cmdline)
	dir, err := os.Getwd()
	if args == nil || err != nil {
		return
	}
	line, err := json.Marshal(goBuildRecord{Dir: dir, Args: args})
	if err != nil {
		return
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0o600)
	if err != nil {
		return
	}
	defer f.Close()
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() || st.Size()+int64(len(line)) >= maxGoBuildsFile {
		return
	}
	f.Write(append(line, '\n'))
}

// goCommandArgs is the arguments of a go command line (NUL-separated, as
// /proc/PID/cmdline) after "go", when it is a go build, test or vet.
func goCommandArgs(cmdline []byte) []string {
	args := strings.Split(strings.TrimRight(string(cmdline), "\x00"), "\x00")
	if len(args) < 2 || filepath.Base(args[0]) != "go" || len(args) > proto.MaxGoBuildArgs+1 {
		return nil
	}
	switch args[1] {
	case "build", "test", "vet":
		return args[1:]
	}
	return nil
}

// collectGoBuilds reads the records in path and returns each module's source
// with them, within proto's bounds; what is left out is said in events.
// Directories in skip (the go command's caches, when a module holds them)
// are not sent.
func collectGoBuilds(path string, skip []string, events *[]string) []proto.GoBuild {
	if path == "" || !filepath.IsAbs(path) {
		return nil
	}
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil
	}
	defer f.Close()
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
		return nil
	}
	deadline := time.Now().Add(goBuildCollectTime)
	var builds []proto.GoBuild
	sources := map[string][]byte{} // by module root
	total := 0
	sc := bufio.NewScanner(io.LimitReader(f, maxGoBuildsFile))
	for sc.Scan() {
		var r goBuildRecord
		if json.Unmarshal(sc.Bytes(), &r) != nil || !filepath.IsAbs(r.Dir) || filepath.Clean(r.Dir) != r.Dir {
			continue
		}
		root := moduleRoot(r.Dir)
		if root == "" || slices.ContainsFunc(builds, func(b proto.GoBuild) bool {
			return b.Root == root && b.Dir == r.Dir && slices.Equal(b.Args, r.Args)
		}) {
			continue
		}
		if len(builds) == proto.MaxGoBuilds {
			*events = append(*events, fmt.Sprintf("go builds: more than %d; the rest are not shared", proto.MaxGoBuilds))
			break
		}
		src, ok := sources[root]
		if !ok {
			var err error
			if src, err = moduleSource(root, skip, deadline); err != nil {
				*events = append(*events, fmt.Sprintf("go build in %s not shared: %v", truncate(root, 200), err))
			}
			sources[root] = src
		}
		if src == nil {
			continue
		}
		if total+len(src) > proto.MaxGoBuildSource {
			*events = append(*events, fmt.Sprintf("go build in %s not shared: its source is over the %d KiB (compressed) sent at a job's end", truncate(root, 200), proto.MaxGoBuildSource>>10))
			continue
		}
		total += len(src)
		builds = append(builds, proto.GoBuild{Root: root, Dir: r.Dir, Args: r.Args, Source: src})
	}
	return builds
}

// moduleRoot is the nearest directory at or above dir holding a go.mod file.
func moduleRoot(dir string) string {
	for d := dir; ; d = filepath.Dir(d) {
		if st, err := os.Lstat(filepath.Join(d, "go.mod")); err == nil && st.Mode().IsRegular() {
			return d
		}
		if d == "/" {
			return ""
		}
	}
}

var errTooBig = errors.New("too big")

// moduleSource is root's regular files and directories as a gzipped tar
// (names relative, times zero, modes 0644/0755: the same module gives the
// same bytes). .git is left out; symbolic links and special files too.
func moduleSource(root string, skip []string, deadline time.Time) ([]byte, error) {
	var buf bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&buf, gzip.BestSpeed)
	tw := tar.NewWriter(zw)
	var raw int64
	files := 0
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("reading it took over %v", goBuildCollectTime)
		}
		rel, err := filepath.Rel(root, p)
		if err != nil || rel == "." {
			return err
		}
		switch {
		case d.IsDir() && (d.Name() == ".git" || slices.Contains(skip, p)):
			return filepath.SkipDir
		case d.IsDir():
			return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: filepath.ToSlash(rel) + "/", Mode: 0o755, ModTime: time.Unix(0, 0), Format: tar.FormatPAX})
		case !d.Type().IsRegular():
			return nil
		}
		if files++; files > proto.MaxGoBuildFiles {
			return fmt.Errorf("more than %d files", proto.MaxGoBuildFiles)
		}
		f, err := os.OpenFile(p, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
		if err != nil {
			return err
		}
		defer f.Close()
		st, err := f.Stat()
		if err != nil || !st.Mode().IsRegular() {
			return err
		}
		if raw += st.Size(); raw > proto.MaxGoBuildRawSource {
			return fmt.Errorf("more than %d MiB", proto.MaxGoBuildRawSource>>20)
		}
		mode := int64(0o644)
		if st.Mode()&0o111 != 0 {
			mode = 0o755
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: filepath.ToSlash(rel), Mode: mode, Size: st.Size(), ModTime: time.Unix(0, 0), Format: tar.FormatPAX}); err != nil {
			return err
		}
		_, err = io.CopyN(tw, f, st.Size())
		if buf.Len() > proto.MaxGoBuildSource {
			return errTooBig
		}
		return err
	})
	if err == nil {
		err = tw.Close()
	}
	if err == nil {
		err = zw.Close()
	}
	if errors.Is(err, errTooBig) || buf.Len() > proto.MaxGoBuildSource {
		return nil, fmt.Errorf("its source is over the %d KiB (compressed) sent at a job's end", proto.MaxGoBuildSource>>10)
	}
	if err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
