package program

// Project helpers (see proto.ScanCommand): scan sums up a granted mount's
// tree before an import copies it, changes compares /workspace with an
// import's baseline, relay carries one TCP connection of expose_port to a
// port on the container's loopback. None of them follows a symbolic link.

import (
	"archive/tar"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"path"
	"strconv"
	"strings"
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

// scan runs as the sandbox user (uid 1000): a file it cannot open, or a
// directory it cannot list, is listed as unreadable.
func scan(dir string, res *proto.ScanResult) error {
	return hosttree.Scan(dir, res, hosttree.Openable(dir))
}

// tarMain writes dir as a tar stream to stdout, read with this process's
// own rights (the sandbox user's in a helper): what it may not read is left
// out and listed in the TarResult on stderr, never copied by anyone else.
func tarMain(args []string, stdout, stderr io.Writer) int {
	var res proto.TarResult
	if len(args) != 1 {
		res.Error = "usage: tar DIR"
	} else if err := tarTree(args[0], stdout, &res); err != nil {
		res.Error = err.Error()
	}
	_ = json.NewEncoder(stderr).Encode(res)
	if res.Error != "" {
		return 1
	}
	return 0
}

func tarTree(dir string, w io.Writer, res *proto.TarResult) error {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	tw := tar.NewWriter(w)
	err = hosttree.WriteTar(tw, root, "", 1000, 1000, 0, nil, res.Skip)
	if err != nil {
		return err
	}
	return tw.Close()
}

// untarMain writes the tar stream on stdin under dir.
func untarMain(args []string, stdin io.Reader, stdout io.Writer) int {
	var res proto.UntarResult
	if len(args) != 1 {
		res.Error = "usage: untar DIR"
	} else if err := untar(args[0], stdin, &res); err != nil {
		res.Error = err.Error()
	}
	_ = json.NewEncoder(stdout).Encode(res)
	if res.Error != "" {
		return 1
	}
	return 0
}

// untar writes a tar stream's directories, regular files and symbolic links
// under dir through an os.Root: no name, ".." or link (one in the stream
// included) leads a write outside dir, and a link is made as it is, its
// target never followed or checked, so a link leaving the tree (../shared/x)
// is kept as the tree had it. Modes keep their permission bits only.
// Directories get their modes last, so a read-only one is filled first.
func untar(dir string, r io.Reader, res *proto.UntarResult) error {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	type dirMode struct {
		name string
		mode os.FileMode
		mt   time.Time
	}
	var dirs []dirMode
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
		name := path.Clean(strings.TrimPrefix(h.Name, "./"))
		if name == "." {
			continue
		}
		if path.IsAbs(name) || name == ".." || strings.HasPrefix(name, "../") {
			return fmt.Errorf("%q leaves the tree", h.Name)
		}
		if parent := path.Dir(name); parent != "." {
			if err := root.MkdirAll(parent, 0o755); err != nil {
				return err
			}
		}
		mode := os.FileMode(h.Mode) & os.ModePerm
		switch h.Typeflag {
		case tar.TypeDir:
			if err := root.MkdirAll(name, 0o755); err != nil {
				return err
			}
			dirs = append(dirs, dirMode{name, mode, h.ModTime})
			res.Dirs++
		case tar.TypeReg:
			if err := writeFile(root, name, mode, tr, h.Size); err != nil {
				return err
			}
			_ = root.Chtimes(name, h.ModTime, h.ModTime)
			res.Files++
			res.Bytes += h.Size
		case tar.TypeSymlink:
			_ = root.Remove(name)
			if err := root.Symlink(h.Linkname, name); err != nil {
				return err
			}
			res.Links++
		}
	}
	for i := len(dirs) - 1; i >= 0; i-- { // deepest first
		_ = root.Chmod(dirs[i].name, dirs[i].mode|0o700)
		_ = root.Chtimes(dirs[i].name, dirs[i].mt, dirs[i].mt)
	}
	return nil
}

// writeFile writes size bytes of r to a new regular file name (replacing a
// file, never writing through a link).
func writeFile(root *os.Root, name string, mode os.FileMode, r io.Reader, size int64) error {
	_ = root.Remove(name)
	f, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, mode|0o600)
	if err != nil {
		return err
	}
	if _, err := io.CopyN(f, r, size); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return root.Chmod(name, mode)
}

// changesMain reports what under /workspace differs from a baseline.
func changesMain(stdin io.Reader, stdout io.Writer) int {
	var req proto.ChangesRequest
	var res proto.ChangesResult
	if err := json.NewDecoder(stdin).Decode(&req); err != nil {
		res.Error = "bad request: " + err.Error()
	} else if res.Changes, err = hosttree.Changes(fsRoot, req); err != nil {
		res.Error = err.Error()
	}
	_ = json.NewEncoder(stdout).Encode(res)
	if res.Error != "" {
		return 1
	}
	return 0
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
