// Package proto is the wire protocol between the sandboxer server and
// sandboxer-supervisor, the main process of every job container.
//
// # Transport
//
// The server writes frames to the container's attached stdin; the supervisor
// writes frames to its stdout (and nothing else: its own diagnostics go to
// stderr). A frame is
//
//	+--------+----------------------------+-----------------+
//	| type   | length (uint32 big-endian) | payload         |
//	| 1 byte | 4 bytes                    | length bytes    |
//	+--------+----------------------------+-----------------+
//
// The payload is at most MaxPayload (1 MiB) bytes; a longer length is a
// protocol error (ErrTooLarge) and the stream cannot be resynchronised.
// Type bytes are printable ASCII so that a hex dump of a stream is readable:
// upper case travels server → supervisor, lower case supervisor → server.
//
// # Server → supervisor (stdin)
//
//	'S' Spec    JSON Spec: what to run. Exactly one, and it must come first.
//	'D' Data    raw bytes for the job's stdin (pipe or pty).
//	'E' EOF     close the job's stdin (with a TTY: send the VEOF character ^D).
//	'G' Signal  a signal name ("TERM", "INT", "SIGKILL", ...), delivered to the
//	            job's process group, or with a TTY to the pty's foreground
//	            process group.
//	'R' Resize  JSON TTYSpec {rows, cols}: TIOCSWINSZ on the pty (ignored
//	            without a TTY).
//	'K' Kill    kill the whole job tree now (SIGKILL, repeated until none is left).
//
// # Supervisor → server (stdout)
//
//	'h' Hello   JSON Hello, always the first frame, written before the Spec is
//	            read, so the server can check the protocol version.
//	's' Started JSON Started {pid, started_at} once the job is running.
//	'o' Stdout  raw bytes the job wrote to stdout (with a TTY: everything the
//	            pty produced, there is no separate stderr).
//	'e' Stderr  raw bytes the job wrote to stderr.
//	'a' Ack     8 bytes, big-endian: total bytes of Data the job's stdin has
//	            taken so far. The server keeps at most a window of input
//	            unacknowledged (flow control), so input is never dropped.
//	'f' File    a part of a file the job returns (Spec.Collect; collect.go),
//	            sent after the job's processes are gone, before Exit.
//	'x' Exit    JSON Exit: how the job ended. The last frame; the supervisor
//	            then exits with the job's exit code (so the engine's own
//	            record of the container agrees) and the container stops.
//
// # Life cycle
//
// The supervisor starts (in a warm container, before any job exists), writes
// Hello and waits for the Spec. It then starts the job, writes Started,
// relays stdio until the job's main process has ended and every leftover
// process of the job is killed, and writes Exit. If the job cannot start
// (malformed Spec, executable not found, ...) there is no Started frame: Exit
// carries Error and ExitCode 125 (bad Spec or protocol), 126 (found but could
// not be executed) or 127 (executable not found).
//
// End of the supervisor's stdin (the server died or detached) does not stop
// the job (unless Spec.KillOnDetach: then it is killed as by a Kill frame): it keeps running, its output keeps being written, and the deadline
// (Spec.TimeoutMS, measured from receipt of the Spec) is enforced by the
// supervisor alone. A restarted server re-adopts the job by following the
// container's output. Data that the job does not read is queued up to
// MaxStdinQueue bytes; beyond that it is dropped (and counted in an Exit
// event) so that Signal and Kill frames behind it are never stalled.
package proto

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"
	"time"
)

// Version is the protocol version carried in Hello. A server must refuse a
// supervisor whose Hello.Protocol differs from the version it was built with.
const Version = 1

// MaxPayload is the largest payload of one frame, in either direction.
const MaxPayload = 1 << 20

// MaxStdinQueue is how many bytes of job stdin the supervisor holds while the
// job does not read them. Data past it is dropped.
const MaxStdinQueue = 8 << 20

// HeaderSize is the size of a frame header: type byte + big-endian length.
const HeaderSize = 5

// Frame types, server → supervisor.
const (
	TypeSpec   byte = 'S'
	TypeData   byte = 'D'
	TypeEOF    byte = 'E'
	TypeSignal byte = 'G'
	TypeResize byte = 'R'
	TypeKill   byte = 'K'
	// TypeExitAck: the server has the Exit frame (and so every frame
	// before it); a supervisor told to wait for it (Spec.AwaitExitAck)
	// may end.
	TypeExitAck byte = 'X'
)

// ExitAckWait bounds how long a supervisor waits for TypeExitAck after its
// Exit frame: a server that is gone (or reads the log instead) costs the
// sandbox this much more life, no more.
const ExitAckWait = 10 * time.Second

// Frame types, supervisor → server.
const (
	TypeHello   byte = 'h'
	TypeStarted byte = 's'
	TypeStdout  byte = 'o'
	TypeStderr  byte = 'e'
	TypeExit    byte = 'x'
	TypeAck     byte = 'a'
)

// EncodeAck is the payload of the 'a' frame: how many bytes of input the job's
// stdin has taken so far, in total. The server sends no more than a window of
// input past it, so the supervisor never has to drop any.
func EncodeAck(total uint64) []byte { return binary.BigEndian.AppendUint64(nil, total) }

// DecodeAck parses an 'a' payload.
func DecodeAck(p []byte) (uint64, error) {
	if len(p) != 8 {
		return 0, fmt.Errorf("proto: ack payload of %d bytes, want 8", len(p))
	}
	return binary.BigEndian.Uint64(p), nil
}

// ErrTooLarge is returned for a frame whose payload exceeds MaxPayload.
var ErrTooLarge = errors.New("proto: frame payload exceeds 1 MiB")

// TypeName names a frame type for logs ("Spec", "Stdout", ...), or "0x.." if unknown.
func TypeName(t byte) string {
	switch t {
	case TypeSpec:
		return "Spec"
	case TypeData:
		return "Data"
	case TypeEOF:
		return "EOF"
	case TypeSignal:
		return "Signal"
	case TypeResize:
		return "Resize"
	case TypeKill:
		return "Kill"
	case TypeExitAck:
		return "ExitAck"
	case TypeHello:
		return "Hello"
	case TypeStarted:
		return "Started"
	case TypeStdout:
		return "Stdout"
	case TypeStderr:
		return "Stderr"
	case TypeExit:
		return "Exit"
	case TypeAck:
		return "Ack"
	case TypeFile:
		return "File"
	}
	return fmt.Sprintf("0x%02x", t)
}

// AppendFrame appends one encoded frame to dst.
func AppendFrame(dst []byte, typ byte, payload []byte) ([]byte, error) {
	if len(payload) > MaxPayload {
		return dst, ErrTooLarge
	}
	dst = append(dst, typ, 0, 0, 0, 0)
	binary.BigEndian.PutUint32(dst[len(dst)-4:], uint32(len(payload)))
	return append(dst, payload...), nil
}

// WriteFrame writes one frame with a single Write call, so that writers
// sharing w under a mutex never interleave partial frames.
func WriteFrame(w io.Writer, typ byte, payload []byte) error {
	buf, err := AppendFrame(make([]byte, 0, HeaderSize+len(payload)), typ, payload)
	if err != nil {
		return err
	}
	_, err = w.Write(buf)
	return err
}

// WriteJSON writes a frame whose payload is v encoded as JSON.
func WriteJSON(w io.Writer, typ byte, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return WriteFrame(w, typ, b)
}

// Reader reads frames from a byte stream, however the stream splits them
// across reads.
type Reader struct {
	r   io.Reader
	hdr [HeaderSize]byte
}

// NewReader returns a Reader on r. Wrap r in a bufio.Reader if it is
// unbuffered and frames are small, to save system calls.
func NewReader(r io.Reader) *Reader { return &Reader{r: r} }

// Next returns the next frame. It returns io.EOF at a clean end of stream
// (between frames), io.ErrUnexpectedEOF if the stream ends inside a frame,
// and ErrTooLarge for a length above MaxPayload (the stream is then unusable).
// The payload is freshly allocated and owned by the caller.
func (r *Reader) Next() (typ byte, payload []byte, err error) {
	if _, err := io.ReadFull(r.r, r.hdr[:]); err != nil {
		return 0, nil, err
	}
	n := binary.BigEndian.Uint32(r.hdr[1:])
	if n > MaxPayload {
		return 0, nil, ErrTooLarge
	}
	payload = make([]byte, n)
	if _, err := io.ReadFull(r.r, payload); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return 0, nil, err
	}
	return r.hdr[0], payload, nil
}

// Resync reads from a supervisor's output joined mid-stream (an engine's
// live attach, which starts wherever the engine's next read of the pipe
// starts — in practice at a frame boundary, since frames are written whole).
// It drops bytes until a plausible frame header: an outgoing type and a length
// within MaxPayload, whose payload is valid JSON for the JSON frame types.
// It returns a Reader positioned there. A false match is possible only in
// the rare case the join falls inside a payload that looks like a header.
func Resync(r *bufio.Reader) *Reader {
	for {
		hdr, err := r.Peek(HeaderSize)
		if err != nil {
			return NewReader(r)
		}
		if plausible(r, hdr) {
			return NewReader(r)
		}
		_, _ = r.Discard(1)
	}
}

func plausible(r *bufio.Reader, hdr []byte) bool {
	n := binary.BigEndian.Uint32(hdr[1:])
	if n > MaxPayload {
		return false
	}
	switch hdr[0] {
	case TypeStdout, TypeStderr:
		return true
	case TypeAck:
		return n == 8
	case TypeHello, TypeStarted, TypeExit:
		p, err := r.Peek(HeaderSize + int(n))
		return err == nil && json.Valid(p[HeaderSize:])
	}
	return false
}

// Stdin modes of a Spec.
const (
	StdinPipe   = "pipe"   // Data and EOF frames feed the job's stdin
	StdinClosed = "closed" // the job's stdin is /dev/null
)

// Kill modes of a Spec.
const (
	// KillContainer: the job owns the container. Killing means kill(-1, sig):
	// every process the supervisor may signal except itself and pid 1, until
	// /proc shows no other process. The supervisor refuses this mode unless
	// it is certain to be inside a container's pid namespace (see the
	// supervisor's documentation).
	KillContainer = "container"
	// KillTree: the container is shared (workspaces). Killing means signalling
	// every descendant of the supervisor (it is a child subreaper, so orphans
	// stay below it), until none is left.
	KillTree = "tree"
)

// Rlimit names accepted in Spec.Rlimits.
var RlimitNames = []string{"nofile", "fsize", "nproc", "core"}

// DefaultGraceMS is the time between SIGTERM and SIGKILL at the deadline.
const DefaultGraceMS = 2000

// Spec says what to run. It is the payload of the 'S' frame.
type Spec struct {
	Argv []string `json:"argv"`
	// Env is the complete environment (KEY=VALUE). argv[0] without a slash
	// is looked up in its PATH (a default PATH if it has none).
	Env []string `json:"env"`
	// InheritEnv puts Env over the supervisor's own environment (in a
	// container: the image's) instead of replacing it.
	InheritEnv bool `json:"inherit_env,omitempty"`
	// Cwd is the working directory; empty means the supervisor's own.
	Cwd string `json:"cwd,omitempty"`
	// Stdin is StdinPipe or StdinClosed; empty means StdinClosed.
	Stdin string `json:"stdin,omitempty"`
	// TimeoutMS is the deadline, relative to receipt of the Spec; 0 = none.
	TimeoutMS int64 `json:"timeout_ms,omitempty"`
	// GraceMS is the time between SIGTERM and SIGKILL when the deadline
	// fires; 0 means DefaultGraceMS.
	GraceMS int64 `json:"grace_ms,omitempty"`
	// Rlimits tightens resource limits of the job (keys: RlimitNames). A limit
	// is only ever lowered: soft = min(value, soft), hard = min(value, hard).
	Rlimits map[string]uint64 `json:"rlimits,omitempty"`
	// TTY, if set, runs the job on a pseudo-terminal of that size, as a
	// session leader with the pty as its controlling terminal.
	TTY *TTYSpec `json:"tty,omitempty"`
	// KillMode is KillContainer or KillTree; required.
	KillMode string `json:"kill_mode"`
	// KillOnDetach kills the job (as a Kill frame does) when the server's
	// input ends, instead of letting it run on. A job run by `docker exec`
	// in a shared workspace container sets it: no later server can re-join
	// an exec's output, so a job nobody can watch must not linger.
	KillOnDetach bool `json:"kill_on_detach,omitempty"`
	// AwaitExitAck keeps the supervisor (and so the container) alive after
	// its Exit frame until the server acknowledges it (TypeExitAck), its
	// input ends, or ExitAckWait passes. An engine whose attach may lose
	// what a container wrote last when the container ends (Kubernetes)
	// sets it, so the stream stays open until the server has it all.
	AwaitExitAck bool `json:"await_exit_ack,omitempty"`
	// Files are written before the job starts (see File).
	Files []File `json:"files,omitempty"`
	// Seed copies SeedDir, when the image has one, into Cwd before the
	// job starts (a fresh sandbox's empty working directory).
	Seed bool `json:"seed,omitempty"`
	// Collect names the files the job returns (collect.go), sent before Exit.
	Collect *Collect `json:"collect,omitempty"`
}

// File is a file the supervisor writes for the job before starting it, as
// the job's user: Base's content when Base is readable (a file of the
// image, e.g. its CA bundle), then Content. Paths are absolute, under
// FilesDir, so a file never lands where the image or a workspace keeps
// anything.
type File struct {
	Path    string `json:"path"`
	Base    string `json:"base,omitempty"`
	Content []byte `json:"content,omitempty"`
}

// FilesDir holds every File: on the sandbox's /tmp tmpfs.
const FilesDir = "/tmp/.sandboxer/"

// SeedDir is where a template's image keeps the files each fresh job and
// each new workspace made from it starts with (a snapshot's /workspace):
// the supervisor copies them into the job's empty working directory
// (Spec.Seed), or into a new workspace (SeedCommand).
const SeedDir = "/usr/local/share/sandboxer/workspace"

// SeedCommand copies SeedDir into the directory named by its argument.
const SeedCommand = "seed"

// ExecCommand runs its arguments as a command, with clone3 answering ENOSYS
// (see the supervisor's clone3.go): the engine's plain execs in a gVisor
// sandbox go through it.
const ExecCommand = "exec"

// LinkGoCacheSeedsCommand links the image's Go build cache seeds into GOCACHE
// (a workspace's, SANDBOXER_GOCACHE_LINK_SEEDS=1), as the workspace's daemon
// does at its start, and returns once every seed file is there. A go command
// started while the daemon still links could find an output missing, write
// it, and meet the daemon's link into the read-only seed instead: its build
// then fails ("package … is not in std"). Jobs wait for the daemon's links;
// an install, run by the engine beside the daemon, runs this first.
const LinkGoCacheSeedsCommand = "link-go-cache-seeds"

// MaxFilesBytes bounds the Files of one spec, together.
const MaxFilesBytes = 1 << 20

// TTYSpec is a terminal size; also the payload of the 'R' (Resize) frame.
type TTYSpec struct {
	Rows uint16 `json:"rows"`
	Cols uint16 `json:"cols"`
}

// Hello is the payload of the 'h' frame.
type Hello struct {
	Protocol   int    `json:"protocol"`
	Supervisor string `json:"supervisor"` // the supervisor's version
	PID        int    `json:"pid"`        // the supervisor's pid (in the container)
}

// Started is the payload of the 's' frame.
type Started struct {
	PID       int       `json:"pid"`
	StartedAt time.Time `json:"started_at"`
}

// Usage is what the job consumed.
type Usage struct {
	CPUMS           int64 `json:"cpu_ms"`
	PeakMemoryBytes int64 `json:"peak_memory_bytes"`
	WallMS          int64 `json:"wall_ms"`
	// Source says where CPU and memory came from: "cgroup" (the whole
	// container, CPU since the Spec arrived, peak since the container
	// started) or "rusage" (getrusage(RUSAGE_CHILDREN): CPU of every reaped
	// process of the job, peak = the largest single process's max RSS).
	Source string `json:"source"`
}

// Exit is the payload of the 'x' frame.
type Exit struct {
	// ExitCode is the main process's exit status, or 128+signal if a signal
	// killed it; 125/126/127 when the job did not start (see Error).
	ExitCode int `json:"exit_code"`
	// Signal names the signal that killed the main process ("SIGKILL").
	Signal string `json:"signal,omitempty"`
	// TimedOut: the supervisor's deadline fired.
	TimedOut bool `json:"timed_out,omitempty"`
	// Killed: a Kill frame (or a SIGTERM to the supervisor) ended the job.
	Killed bool `json:"killed,omitempty"`
	// OOMKilled: the kernel OOM killer killed a process of the job (known
	// from the container's cgroup only; always false with "rusage").
	OOMKilled bool  `json:"oom_killed,omitempty"`
	Usage     Usage `json:"usage"`
	// Error, if set, says why the job did not start; no Started was sent.
	Error string `json:"error,omitempty"`
	// Events are short notes about what the supervisor did (deadline fired,
	// leftover processes killed, stdin dropped, ...), at most MaxEvents.
	Events []string `json:"events,omitempty"`
	// GoBuilds are the Go modules the job's go commands built, with their
	// source (a fresh sandbox that asked for them: GoBuildsEnv), for a
	// trusted builder to compile again into a shared build cache. Hostile
	// data: the server checks every field.
	GoBuilds []GoBuild `json:"go_builds,omitempty"`
	// Files are the returned files the server assembled from the File
	// frames before this one (never on the wire).
	Files []ReturnedFile `json:"-"`
	// Stamps are the supervisor's clock at each step of the job, for the
	// server's call timelines (hostile data: only ever logged).
	Stamps Stamps `json:"stamps"`
}

// Stamps are instants of a job in the supervisor, as unix nanoseconds (0:
// it did not happen).
type Stamps struct {
	Spec        int64 `json:"spec"`         // the Spec frame read
	Exec        int64 `json:"exec"`         // the job's process about to be started
	Started     int64 `json:"started"`      // the job's process running
	FirstOutput int64 `json:"first_output"` // its first output read
	Exited      int64 `json:"exited"`       // its main process reaped
	Drained     int64 `json:"drained"`      // every output read to its end
	Exit        int64 `json:"exit"`         // the Exit frame going out
}

// MaxEvents bounds Exit.Events.
const MaxEvents = 32

// GoBuildsEnv, in a fresh sandbox's environment, names the file where each
// go command records its directory and arguments (the image's GOCACHEPROG
// writes it); at the end the supervisor sends the modules they built.
const GoBuildsEnv = "SANDBOXER_GO_BUILDS"

// GoBuild is a go command a job ran and the module it ran in.
type GoBuild struct {
	Root string   `json:"root"` // the module's directory (holding go.mod)
	Dir  string   `json:"dir"`  // the go command's working directory, in Root
	Args []string `json:"args"` // its arguments after "go"
	// Source is the module's regular files and directories under Root, as
	// a gzipped tar with relative names.
	Source []byte `json:"source"`
}

// Bounds of Exit.GoBuilds: what does not fit is left out.
const (
	MaxGoBuilds         = 4
	MaxGoBuildArgs      = 64
	MaxGoBuildSource    = 512 << 10 // compressed, all builds together
	MaxGoBuildRawSource = 32 << 20  // uncompressed, one module
	MaxGoBuildFiles     = 5000      // one module
)

// DecodeSpec parses and validates a Spec payload. Unknown fields and trailing
// data are errors.
func DecodeSpec(payload []byte) (Spec, error) {
	var s Spec
	dec := json.NewDecoder(bytes.NewReader(payload))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		return Spec{}, fmt.Errorf("spec: %w", err)
	}
	if dec.More() {
		return Spec{}, errors.New("spec: trailing data after the JSON object")
	}
	if err := s.Validate(); err != nil {
		return Spec{}, err
	}
	return s, nil
}

// Validate checks a Spec; the server should call it before sending one.
func (s *Spec) Validate() error {
	if len(s.Argv) == 0 || s.Argv[0] == "" {
		return errors.New("spec: argv is empty")
	}
	for _, a := range s.Argv {
		if strings.IndexByte(a, 0) >= 0 {
			return errors.New("spec: NUL byte in argv")
		}
	}
	for _, e := range s.Env {
		if strings.IndexByte(e, 0) >= 0 {
			return errors.New("spec: NUL byte in env")
		}
		if k, _, ok := strings.Cut(e, "="); !ok || k == "" {
			return fmt.Errorf("spec: env entry %q is not KEY=VALUE", truncate(e, 40))
		}
	}
	if strings.IndexByte(s.Cwd, 0) >= 0 {
		return errors.New("spec: NUL byte in cwd")
	}
	if s.Collect != nil {
		if err := s.Collect.Validate(); err != nil {
			return err
		}
	}
	total := 0
	for _, f := range s.Files {
		if !strings.HasPrefix(f.Path, FilesDir) || path.Clean(f.Path) != f.Path || strings.IndexByte(f.Path, 0) >= 0 {
			return fmt.Errorf("spec: file %q is not a clean path under %s", truncate(f.Path, 80), FilesDir)
		}
		if f.Base != "" && (!path.IsAbs(f.Base) || strings.IndexByte(f.Base, 0) >= 0) {
			return fmt.Errorf("spec: file base %q is not an absolute path", truncate(f.Base, 80))
		}
		if total += len(f.Content); total > MaxFilesBytes {
			return fmt.Errorf("spec: files hold more than %d bytes", MaxFilesBytes)
		}
	}
	switch s.Stdin {
	case "", StdinPipe, StdinClosed:
	default:
		return fmt.Errorf("spec: stdin %q is neither %q nor %q", truncate(s.Stdin, 20), StdinPipe, StdinClosed)
	}
	switch s.KillMode {
	case KillContainer, KillTree:
	default:
		return fmt.Errorf("spec: kill_mode %q is neither %q nor %q", truncate(s.KillMode, 20), KillContainer, KillTree)
	}
	if s.TimeoutMS < 0 {
		return errors.New("spec: timeout_ms is negative")
	}
	if s.GraceMS < 0 {
		return errors.New("spec: grace_ms is negative")
	}
	for k := range s.Rlimits {
		known := false
		for _, n := range RlimitNames {
			known = known || k == n
		}
		if !known {
			return fmt.Errorf("spec: unknown rlimit %q (known: %s)", truncate(k, 20), strings.Join(RlimitNames, ", "))
		}
	}
	if s.TTY != nil && (s.TTY.Rows == 0 || s.TTY.Cols == 0) {
		return errors.New("spec: tty rows and cols must be positive")
	}
	return nil
}

// DecodeResize parses a Resize payload.
func DecodeResize(payload []byte) (TTYSpec, error) {
	var t TTYSpec
	if err := json.Unmarshal(payload, &t); err != nil {
		return TTYSpec{}, fmt.Errorf("resize: %w", err)
	}
	if t.Rows == 0 || t.Cols == 0 {
		return TTYSpec{}, errors.New("resize: rows and cols must be positive")
	}
	return t, nil
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}
