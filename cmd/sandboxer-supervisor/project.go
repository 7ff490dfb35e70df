package main

// Project helpers (see proto.ScanCommand): scan sums up a granted mount's
// tree before an import copies it, changes compares /workspace with an
// import's baseline, relay carries one TCP connection of expose_port to a
// port on the container's loopback. None of them follows a symbolic link.

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/sandboxer/sandboxer/internal/hosttree"
	"github.com/sandboxer/sandboxer/internal/supervisor/proto"
	"golang.org/x/sys/unix"
)

// scanMain walks dir and reports its size and the files an import skips.
func scanMain(args []string, stdout io.Writer) int {
	var res proto.ScanResult
	if len(args) != 1 {
		res.Error = "usage: scan DIR"
	} else if err := scan(args[0], &res); err != nil {
		res.Error = err.Error()
	}
	_ = json.NewEncoder(stdout).Encode(res)
	if res.Error != "" {
		return 1
	}
	return 0
}

func scan(dir string, res *proto.ScanResult) error {
	return hosttree.Scan(os.DirFS(dir), res, nil)
}

func rel(dir, p string) string {
	r, err := filepath.Rel(dir, p)
	if err != nil {
		return p
	}
	return filepath.ToSlash(r)
}

// changesMain reports what under /workspace differs from a baseline.
func changesMain(stdin io.Reader, stdout io.Writer) int {
	var req proto.ChangesRequest
	var res proto.ChangesResult
	if err := json.NewDecoder(stdin).Decode(&req); err != nil {
		res.Error = "bad request: " + err.Error()
	} else if res.Changes, err = changes(fsRoot, req); err != nil {
		res.Error = err.Error()
	}
	_ = json.NewEncoder(stdout).Encode(res)
	if res.Error != "" {
		return 1
	}
	return 0
}

func changes(root string, req proto.ChangesRequest) ([]proto.Change, error) {
	base := make(map[string]proto.BaselineEntry, len(req.Baseline))
	for _, e := range req.Baseline {
		base[e.Path] = e
	}
	excluded := map[string]bool{}
	for _, e := range req.Exclude {
		excluded[e] = true
	}
	budget := req.MaxTotalBytes
	seen := map[string]bool{}
	var out []proto.Change
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		r := rel(root, p)
		if err != nil {
			if errors.Is(err, fs.ErrPermission) && r != "." {
				out = append(out, proto.Change{Path: r, Change: "modified", Type: "dir", Omitted: true, Note: "unreadable directory (not owned by uid 1000): not compared"})
				return fs.SkipDir
			}
			return err
		}
		if r == "." {
			return nil
		}
		if excluded[r] {
			if d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		t := d.Type()
		if t.IsDir() {
			return nil
		}
		old, had := base[r]
		seen[r] = true
		c := proto.Change{Path: r, Change: "added"}
		if had {
			c.Change = "modified"
		}
		switch {
		case t&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			if had && old.Type == "symlink" && old.Target == target {
				return nil
			}
			c.Type, c.Target = "symlink", target
		case t.IsRegular():
			c.Type = "file"
			sum, ok := readFileChange(p, &c, req.MaxFileBytes, &budget)
			if !ok {
				return nil
			}
			if had && old.Type == "file" && old.SHA256 == sum && old.Mode == c.Mode {
				budget += int64(len(c.Content)) // unchanged: its content is not sent
				return nil
			}
		default:
			return nil // sockets, FIFOs and devices are not content
		}
		out = append(out, c)
		return nil
	})
	if err != nil {
		return nil, err
	}
	for _, e := range req.Baseline {
		if e.Type != "dir" && !seen[e.Path] && !underExcluded(e.Path, excluded) {
			out = append(out, proto.Change{Path: e.Path, Change: "deleted", Type: e.Type, Mode: e.Mode, Target: e.Target})
		}
	}
	return out, nil
}

func underExcluded(p string, excluded map[string]bool) bool {
	for q := p; q != "." && q != "/" && q != ""; q = filepath.Dir(q) {
		if excluded[q] {
			return true
		}
	}
	return false
}

// readFileChange hashes a regular file (opened without following links or
// blocking) and keeps its content when it is text within the limits; it
// returns the content's hex SHA-256 ("" when unreadable: c.Note says why),
// and false when the path is no longer a regular file.
func readFileChange(p string, c *proto.Change, maxFile int64, budget *int64) (string, bool) {
	f, err := os.OpenFile(p, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if err != nil {
		c.Omitted, c.Note = true, "unreadable: "+err.Error()
		return "", true
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil || !st.Mode().IsRegular() {
		return "", false // swapped for something else under us
	}
	c.Mode, c.Size = uint32(st.Mode().Perm()), st.Size()
	h := sha256.New()
	var content bytes.Buffer
	keep := st.Size() <= maxFile && st.Size() <= *budget
	var w io.Writer = h
	if keep {
		w = io.MultiWriter(h, &content)
	}
	if _, err := io.Copy(w, f); err != nil {
		c.Omitted, c.Note = true, "unreadable: "+err.Error()
		return "", true
	}
	head := content.Bytes()
	if len(head) > 8000 {
		head = head[:8000]
	}
	switch {
	case !keep:
		c.Omitted = true
	case bytes.IndexByte(head, 0) >= 0:
		c.Binary = true
	default:
		c.Content = content.Bytes()
		*budget -= int64(content.Len())
	}
	return hex.EncodeToString(h.Sum(nil)), true
}

// relayMain carries stdin to 127.0.0.1:PORT (or [::1]) and the answer to
// stdout; it exits at once, with a message, when nothing listens there.
func relayMain(args []string, stdin io.Reader, stdout io.Writer) int {
	probe := len(args) == 2 && args[1] == "probe" // only say whether something listens
	if len(args) != 1 && !probe {
		fmt.Fprintln(os.Stderr, "usage: relay PORT [probe]")
		return 2
	}
	port, err := strconv.Atoi(args[0])
	if err != nil || port < 1 || port > 65535 {
		fmt.Fprintf(os.Stderr, "relay: bad port %q\n", args[0])
		return 2
	}
	var conn net.Conn
	for _, host := range []string{"127.0.0.1", "::1"} {
		if conn, err = net.DialTimeout("tcp", net.JoinHostPort(host, args[0]), 5*time.Second); err == nil {
			break
		}
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "relay: nothing listens on port %d in the workspace: %v\n", port, err)
		return 1
	}
	defer conn.Close()
	if probe {
		return 0
	}
	go func() {
		_, _ = io.Copy(conn, stdin)
		if tc, ok := conn.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
	}()
	_, _ = io.Copy(stdout, conn)
	return 0
}
