package main

// Project helpers (see proto.ScanCommand): scan sums up a granted mount's
// tree before an import copies it, changes compares /workspace with an
// import's baseline, relay carries one TCP connection of expose_port to a
// port on the container's loopback. None of them follows a symbolic link.

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"time"

	"github.com/sandboxer/sandboxer/internal/hosttree"
	"github.com/sandboxer/sandboxer/internal/supervisor/proto"
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
	return hosttree.Scan(dir, res, nil)
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
