package proto

// # Workspace daemon
//
// A workspace's container runs `sandboxer-supervisor daemon` as its main
// process (under the engine's init). It listens on the abstract unix socket
// DaemonSocket, which exists only in the container's network namespace (no
// file a job could replace, nothing outside the container can reach it). The
// server reaches it through one exec of `sandboxer-supervisor connect`, which
// pipes the exec's stdin/stdout to that socket: one long-lived stream per
// workspace and server process, made once, not one exec per job.
//
// Every job on that stream is a channel named by a key (the job's id). A
// channel carries exactly the single-job frames above, each wrapped in a Mux
// frame:
//
//	'M' Mux    payload = key length (1 byte) | key | inner type (1 byte) | inner payload
//
// A Spec on a new key starts a job: the daemon hands it to a fresh
// single-job supervisor (kill mode "tree"), which runs it exactly as in a
// fresh sandbox, and relays that supervisor's frames back on the channel.
// The other frames of the stream, not wrapped:
//
//	'A' Attach  server → daemon, JSON Attach: route a running (or ended,
//	            not yet forgotten) job's channel to this stream, replaying
//	            its output past the given byte counts. A server restarted
//	            after a crash re-attaches its jobs this way.
//	'F' Forget  server → daemon, payload = key: the server has stored the
//	            job's end; the daemon drops what it kept of it.
//	'A' Attach  daemon → server, payload = key: the job is attached (its
//	            replay came before this frame).
//	'h' Hello   daemon → server, JSON Hello, first on every stream.
//	'u' Unknown daemon → server, payload = key: no such job (an Attach for a
//	            job the daemon does not know: the container restarted).
//
// A job outlives its stream: when the stream ends (the server died) the
// daemon keeps the job running, keeps its output (the job is held back,
// never dropped from, once DaemonDetachedBytes are kept) and hands it to the
// next stream that attaches. While attached, the last DaemonRetainBytes of
// output stay kept, for what was in flight when a server died.

import (
	"encoding/json"
	"errors"
	"fmt"
)

// DaemonCommand and ConnectCommand are the supervisor's subcommands for a
// workspace: the container's main process, and the server's exec.
const (
	DaemonCommand  = "daemon"
	ConnectCommand = "connect"
)

// DaemonSocket is the daemon's abstract unix socket (Go's leading '@').
const DaemonSocket = "@sandboxer-supervisor"

// Frame types of a daemon stream.
const (
	TypeMux     byte = 'M'
	TypeAttach  byte = 'A'
	TypeForget  byte = 'F'
	TypeUnknown byte = 'u'
)

// DaemonRetainBytes is how much of a job's latest output the daemon keeps
// while a server is attached; DaemonDetachedBytes how much it keeps while
// none is before it stops reading the job's output (the job then waits).
const (
	DaemonRetainBytes   = 2 << 20
	DaemonDetachedBytes = 8 << 20
)

// MaxKey bounds a channel key.
const MaxKey = 255

// Attach is the payload of the 'A' frame: the job's key and how many bytes of
// its stdout and stderr the server already has.
type Attach struct {
	Key    string `json:"key"`
	Stdout int64  `json:"stdout"`
	Stderr int64  `json:"stderr"`
}

// EncodeAttach is an 'A' payload.
func EncodeAttach(a Attach) []byte { b, _ := json.Marshal(a); return b }

// AppendMux appends one Mux frame wrapping (typ, payload) on channel key.
func AppendMux(dst []byte, key string, typ byte, payload []byte) ([]byte, error) {
	if len(key) == 0 || len(key) > MaxKey {
		return dst, fmt.Errorf("proto: channel key of %d bytes (1..%d)", len(key), MaxKey)
	}
	inner := make([]byte, 0, 2+len(key)+len(payload))
	inner = append(inner, byte(len(key)))
	inner = append(inner, key...)
	inner = append(inner, typ)
	inner = append(inner, payload...)
	return AppendFrame(dst, TypeMux, inner)
}

// MaxMuxPayload is the largest inner payload with the longest key.
const MaxMuxPayload = MaxPayload - 2 - MaxKey

// DecodeMux splits a Mux payload into its key and inner frame.
func DecodeMux(p []byte) (key string, typ byte, payload []byte, err error) {
	if len(p) < 1 {
		return "", 0, nil, errors.New("proto: empty mux frame")
	}
	n := int(p[0])
	if n == 0 || len(p) < 2+n {
		return "", 0, nil, errors.New("proto: short mux frame")
	}
	return string(p[1 : 1+n]), p[1+n], p[2+n:], nil
}
