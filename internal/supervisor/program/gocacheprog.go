package program

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// The supervisor is also the go command's build cache (GOCACHEPROG, Go ≥
// 1.24), so that a fresh sandbox starts warm without sharing anything
// writable: it reads entries from read-only seeds baked into the image
// (SANDBOXER_GOCACHE_SEEDS, directories in the go command's own cache
// layout) and writes new ones only to the job's own GOCACHE (its tmpfs, or a
// workspace's volume). A poisoned entry one job writes is never read by
// another job outside its workspace; the seeds cannot be written at all.

// goCacheProgCommand is the argument that makes the supervisor a GOCACHEPROG.
const goCacheProgCommand = "gocacheprog"

// goCacheSeedsEnv lists the read-only seed caches, separated by ':'.
const goCacheSeedsEnv = "SANDBOXER_GOCACHE_SEEDS"

type cacheRequest struct {
	ID       int64
	Command  string
	ActionID []byte `json:",omitempty"`
	OutputID []byte `json:",omitempty"`
	BodySize int64  `json:",omitempty"`
	ObjectID []byte `json:",omitempty"` // older name of OutputID
}

type cacheResponse struct {
	ID            int64
	Err           string     `json:",omitempty"`
	KnownCommands []string   `json:",omitempty"`
	Miss          bool       `json:",omitempty"`
	OutputID      []byte     `json:",omitempty"`
	Size          int64      `json:",omitempty"`
	Time          *time.Time `json:",omitempty"`
	DiskPath      string     `json:",omitempty"`
}

// goCache is a directory in the go command's cache layout: the entry of
// action A is <dir>/<A[0]>/<A>-a holding "v1 <A> <O> <size> <unixnano>",
// and output O is the file <dir>/<O[0]>/<O>-d.
type goCache string

func (c goCache) path(id []byte, kind string) string {
	h := hex.EncodeToString(id)
	return filepath.Join(string(c), h[:2], h+"-"+kind)
}

// get finds an action's entry whose output file is there, whole.
func (c goCache) get(action []byte) (out []byte, size int64, when time.Time, disk string, ok bool) {
	data, err := os.ReadFile(c.path(action, "a"))
	if err != nil {
		return nil, 0, time.Time{}, "", false
	}
	f := strings.Fields(string(data))
	if len(f) != 5 || f[0] != "v1" || f[1] != hex.EncodeToString(action) {
		return nil, 0, time.Time{}, "", false
	}
	out, err1 := hex.DecodeString(f[2])
	size, err2 := strconv.ParseInt(f[3], 10, 64)
	nano, err3 := strconv.ParseInt(f[4], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil {
		return nil, 0, time.Time{}, "", false
	}
	disk = c.path(out, "d")
	if st, err := os.Stat(disk); err != nil || st.Size() != size {
		return nil, 0, time.Time{}, "", false
	}
	return out, size, time.Unix(0, nano), disk, true
}

// put stores an output and its action's entry, each by an atomic rename.
func (c goCache) put(action, out []byte, body io.Reader) (string, error) {
	disk := c.path(out, "d")
	size, err := writeAtomic(disk, body)
	if err != nil {
		return "", err
	}
	entry := fmt.Sprintf("v1 %x %x %20d %20d\n", action, out, size, time.Now().UnixNano())
	if _, err := writeAtomic(c.path(action, "a"), strings.NewReader(entry)); err != nil {
		return "", err
	}
	return disk, nil
}

func writeAtomic(path string, body io.Reader) (int64, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o777); err != nil {
		return 0, err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tmp-*")
	if err != nil {
		return 0, err
	}
	n, err := io.Copy(tmp, body)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		os.Remove(tmp.Name())
	}
	return n, err
}

// goCacheIndexFile, in a seed that never changes (the image's), lists every
// entry whose output is there, whole, one per line as its action file
// holds it (the go image's Dockerfile writes it). The cache program then
// answers from memory: a go test makes hundreds of requests, one after the
// other, and each lookup on disk costs tens of microseconds in a new
// container.
const goCacheIndexFile = "index"

// indexedEntry is an entry of a seed's index.
type indexedEntry struct {
	out  []byte
	size int64
	when time.Time
}

// readGoCacheIndex reads dir's index; nil when it has none.
func readGoCacheIndex(dir string) map[string]indexedEntry {
	data, err := os.ReadFile(filepath.Join(dir, goCacheIndexFile))
	if err != nil {
		return nil
	}
	idx := map[string]indexedEntry{}
	for line := range strings.Lines(string(data)) {
		f := strings.Fields(line)
		if len(f) != 5 || f[0] != "v1" {
			continue
		}
		out, err1 := hex.DecodeString(f[2])
		size, err2 := strconv.ParseInt(f[3], 10, 64)
		nano, err3 := strconv.ParseInt(f[4], 10, 64)
		if err1 == nil && err2 == nil && err3 == nil {
			idx[f[1]] = indexedEntry{out: out, size: size, when: time.Unix(0, nano)}
		}
	}
	return idx
}

// seed is a read-only cache the program reads, with its index if it has one.
type seed struct {
	dir   goCache
	index map[string]indexedEntry
}

func (s seed) get(action []byte) (out []byte, size int64, when time.Time, disk string, ok bool) {
	if s.index == nil {
		return s.dir.get(action)
	}
	e, ok := s.index[hex.EncodeToString(action)]
	if !ok {
		return nil, 0, time.Time{}, "", false
	}
	return e.out, e.size, e.when, s.dir.path(e.out, "d"), true
}

// goCacheProgMain serves the go command on stdin/stdout until "close" or EOF.
func goCacheProgMain(stdin io.Reader, stdout io.Writer) int {
	recordGoBuild()
	own := goCache(os.Getenv("GOCACHE"))
	if own == "" || !filepath.IsAbs(string(own)) {
		logger.Print("gocacheprog: GOCACHE must be an absolute directory")
		return 2
	}
	caches := []seed{{dir: own}}
	for _, s := range filepath.SplitList(os.Getenv(goCacheSeedsEnv)) {
		if s == "" || filepath.Clean(s) == filepath.Clean(string(own)) {
			continue
		}
		// A seed that is a link (the shared build cache's current
		// generation) is read where it points now, for this whole go
		// command: a later switch does not move the outputs it was given.
		if r, err := filepath.EvalSymlinks(s); err == nil {
			s = r
		}
		caches = append(caches, seed{dir: goCache(s), index: readGoCacheIndex(s)})
	}
	w := bufio.NewWriter(stdout)
	enc := json.NewEncoder(w)
	respond := func(r cacheResponse) bool {
		return enc.Encode(r) == nil && w.Flush() == nil
	}
	if !respond(cacheResponse{KnownCommands: []string{"get", "put", "close"}}) {
		return 1
	}
	dec := json.NewDecoder(bufio.NewReader(stdin))
	for {
		var req cacheRequest
		if err := dec.Decode(&req); err != nil {
			if errors.Is(err, io.EOF) {
				return 0
			}
			logger.Printf("gocacheprog: %v", err)
			return 1
		}
		res := cacheResponse{ID: req.ID}
		switch req.Command {
		case "get":
			res.Miss = true
			for _, c := range caches { // the job's own first
				if out, size, when, disk, ok := c.get(req.ActionID); ok {
					res = cacheResponse{ID: req.ID, OutputID: out, Size: size, Time: &when, DiskPath: disk}
					break
				}
			}
		case "put":
			out := req.OutputID
			if out == nil {
				out = req.ObjectID
			}
			var body []byte
			if req.BodySize > 0 {
				var b64 string
				if err := dec.Decode(&b64); err != nil {
					logger.Printf("gocacheprog: put body: %v", err)
					return 1
				}
				var err error
				if body, err = base64.StdEncoding.DecodeString(b64); err != nil || int64(len(body)) != req.BodySize {
					res.Err = fmt.Sprintf("put body: %d bytes, want %d (%v)", len(body), req.BodySize, err)
					break
				}
			}
			disk, err := own.put(req.ActionID, out, bytes.NewReader(body))
			if err != nil {
				res.Err = err.Error()
			}
			res.DiskPath = disk
		case "close":
			respond(res)
			return 0
		default:
			res.Err = fmt.Sprintf("unknown command %q", req.Command)
		}
		if !respond(res) {
			return 1
		}
	}
}

// goCacheLinkEnv, set to 1 in a workspace's environment (with GOCACHEPROG
// empty), makes the daemon link the seeds' outputs into the workspace's own
// GOCACHE on its volume at each start: the go command then reads its own
// directory with no GOCACHEPROG round trip per action (hundreds per go
// test), and finds the standard library warm there. The links point into
// the image's read-only seeds, so a job can replace a link in its own
// workspace's cache, never what a link points to.
const goCacheLinkEnv = "SANDBOXER_GOCACHE_LINK_SEEDS"

// linkGoCacheSeeds links every seed output missing from GOCACHE and copies
// its action entries (175 bytes each, and the go command rewrites some of
// them in place, which through a link into the read-only seed fails and
// fails its build). Names already present stay. It is done once per seed:
// a marker in GOCACHE names the seeds it was done for, so a later start
// costs one read (what the go command's trim removes after days of disuse
// is then built again when needed).
func linkGoCacheSeeds() (linked int, err error) {
	own := os.Getenv("GOCACHE")
	if os.Getenv(goCacheLinkEnv) != "1" || own == "" || !filepath.IsAbs(own) {
		return 0, nil
	}
	var seeds []string
	var identity strings.Builder
	for _, seed := range filepath.SplitList(os.Getenv(goCacheSeedsEnv)) {
		if seed == "" || filepath.Clean(seed) == filepath.Clean(own) {
			continue
		}
		fi, err := os.Stat(seed)
		if err != nil {
			return 0, err
		}
		seeds = append(seeds, seed)
		fmt.Fprintf(&identity, "%s %d\n", seed, fi.ModTime().UnixNano())
	}
	if len(seeds) == 0 {
		return 0, nil // an image without a seed: nothing to link, nothing to write
	}
	marker := filepath.Join(own, seedMarker)
	if b, err := os.ReadFile(marker); err == nil && string(b) == identity.String() {
		return 0, nil
	}
	for _, seed := range seeds {
		dirs, err := os.ReadDir(seed)
		if err != nil {
			return linked, err
		}
		for _, d := range dirs {
			if !d.IsDir() || len(d.Name()) != 2 {
				continue
			}
			files, err := os.ReadDir(filepath.Join(seed, d.Name()))
			if err != nil {
				return linked, err
			}
			dst := filepath.Join(own, d.Name())
			if err := os.MkdirAll(dst, 0o777); err != nil {
				return linked, err
			}
			for _, f := range files {
				if !f.Type().IsRegular() {
					continue
				}
				n, err := linkSeedFile(filepath.Join(seed, d.Name(), f.Name()), filepath.Join(dst, f.Name()))
				if err != nil {
					return linked, err
				}
				linked += n
			}
		}
	}
	_, err = writeAtomic(marker, strings.NewReader(identity.String()))
	return linked, err
}

// linkGoCacheSeedsMain is `sandboxer-supervisor link-go-cache-seeds`
// (proto.LinkGoCacheSeedsCommand). Beside the daemon's linking it is safe:
// each name is made once (O_EXCL, symlink), whoever comes first.
func linkGoCacheSeedsMain() int {
	if n, err := linkGoCacheSeeds(); err != nil {
		logger.Printf("linking the go build cache's seeds (%d linked): %v", n, err)
		return 1
	}
	return 0
}

// seedMarker, in a workspace's GOCACHE, names the seeds linked into it.
const seedMarker = ".sandboxer-seeds"

// linkSeedFile puts one seed file at dst unless dst exists: an output as a
// link, an action entry as a copy. It returns 1 if it put one.
func linkSeedFile(src, dst string) (int, error) {
	if !strings.HasSuffix(dst, "-a") {
		if err := os.Symlink(src, dst); err != nil {
			if os.IsExist(err) {
				return 0, nil
			}
			return 0, err
		}
		return 1, nil
	}
	entry, err := os.ReadFile(src)
	if err != nil {
		return 0, err
	}
	f, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		if os.IsExist(err) {
			return 0, nil
		}
		return 0, err
	}
	_, err = f.Write(entry)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		// A partial entry would read as a miss; none is better.
		os.Remove(dst)
		return 0, err
	}
	return 1, nil
}
