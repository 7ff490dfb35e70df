// Package program is sandboxer-supervisor, the main process of every
// sandboxer job container (under Docker's --init, as the unprivileged
// sandbox user); cmd/sandboxer-supervisor only calls Main.
//
// It is started before any job exists (a warm pool): it writes a Hello frame
// to stdout, then waits, running nothing, for one Spec frame on stdin. It runs
// that job, relays its stdio as frames, enforces the deadline itself (whether
// or not the server is still there), kills every leftover process of the job,
// writes one Exit frame and exits 0, so the container stops. The protocol is
// documented in internal/supervisor/proto. Nothing but frames is written to
// stdout; diagnostics go to stderr.
//
// The supervisor is a child subreaper: orphans of the job (double fork,
// setsid ... &) are reparented to it, reaped by it, and found by it through
// /proc when the job is killed.
//
// Kill modes. "tree" signals every descendant of the supervisor. "container"
// uses kill(-1, sig), which would hit every process of the user if run on a
// host, so the supervisor refuses it (Exit error, code 125) unless it is
// certain to be the init process of a pid namespace or that init's direct
// child started to run it:
//
//	getpid() == 1, or
//	getppid() == 1 and getpid() < 300 and /proc/1/cmdline names this
//	executable (docker-init/tini started as "docker-init -- sandboxer-supervisor").
//
// The kernel never hands out pids below 300 once pids have wrapped
// (RESERVED_PIDS), so on a host such pids belong to early boot processes,
// never to something started later; and a host's pid 1 (systemd, init) does
// not carry this executable in its command line. There is no override.
package program

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/sandboxer/sandboxer/internal/hardening"
	"io"
	"log"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sandboxer/sandboxer/internal/supervisor/proto"
	"github.com/sandboxer/sandboxer/internal/tunnel"
	"golang.org/x/sys/unix"
)

// version is the supervisor's version, reported in Hello (-ldflags "-X main.version=...").
var version = "0.1.0"

// Exit codes for a job that did not start (as docker run uses them).
const (
	codeBadSpec     = 125
	codeCannotExec  = 126
	codeNotFound    = 127
	outputChunk     = 32 << 10
	drainTimeout    = 2 * time.Second
	killLoopTimeout = 5 * time.Second
)

var logger = log.New(os.Stderr, "sandboxer-supervisor: ", log.Lmsgprefix)

// Main runs the supervisor as its command line (os.Args) says, and exits.
func Main() {
	if len(os.Args) > 1 && os.Args[1] == proto.ExecCommand {
		os.Exit(execMain(os.Args[2:]))
	}
	if startsPrograms(os.Args[1:]) {
		if err := clone3NoSys(); err != nil {
			fmt.Fprintf(os.Stderr, "sandboxer-supervisor: clone3 stays EPERM, threads may not start: %v\n", err)
		}
	}
	if len(os.Args) > 1 && os.Args[1] == shimFlag {
		os.Exit(shimMain(os.Args[2:]))
	}
	if len(os.Args) > 1 && os.Args[1] == goCacheProgCommand {
		os.Exit(goCacheProgMain(os.Stdin, os.Stdout))
	}
	if len(os.Args) > 1 && os.Args[1] == proto.FSCommand {
		os.Exit(fsMain(os.Args[2:], os.Stdin, os.Stdout))
	}
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case proto.WatchCommand:
			os.Exit(watchMain(os.Args[2:], os.Stdin, os.Stdout))
		case proto.MetricsCommand:
			os.Exit(metricsMain(os.Stdout))
		case proto.ScanCommand:
			os.Exit(scanMain(os.Args[2:], os.Stdout))
		case proto.TarCommand:
			os.Exit(tarMain(os.Args[2:], os.Stdout, os.Stderr))
		case proto.UntarCommand:
			os.Exit(untarMain(os.Args[2:], os.Stdin, os.Stdout))
		case proto.ChangesCommand:
			os.Exit(changesMain(os.Stdin, os.Stdout))
		case proto.RelayCommand:
			os.Exit(relayMain(os.Args[2:], os.Stdin, os.Stdout))
		case proto.SeedCommand:
			os.Exit(seedMain(os.Args[2:]))
		case proto.LinkGoCacheSeedsCommand:
			os.Exit(linkGoCacheSeedsMain())
		case proto.DaemonCommand:
			os.Exit(daemonMain())
		case hardening.ProbeCommand:
			os.Exit(probeMain(os.Args[2:], os.Stdout))
		case proto.ConnectCommand:
			os.Exit(connectMain(os.Stdin, os.Stdout))
		case proto.PrestartCommand:
			var pre proto.Prestart
			if len(os.Args) != 3 || json.Unmarshal([]byte(os.Args[2]), &pre) != nil {
				logger.Print("usage: sandboxer-supervisor prestart '<JSON Prestart>'")
				os.Exit(codeBadSpec)
			}
			os.Exit(run(os.Stdin, os.Stdout, &pre))
		case tunnel.Command:
			os.Exit(tunnelMain(os.Args[2:], os.Stdin, os.Stdout, os.Stderr))
		}
	}
	os.Exit(run(os.Stdin, os.Stdout, nil))
}

// frameWriter serialises frames to the server. After the first write error
// (the server is gone and nobody reads) it discards everything: the job and
// the deadline carry on regardless.
type frameWriter struct {
	mu     sync.Mutex
	w      io.Writer
	broken bool
}

func (fw *frameWriter) frame(typ byte, p []byte) {
	fw.mu.Lock()
	defer fw.mu.Unlock()
	if fw.broken {
		return
	}
	if err := proto.WriteFrame(fw.w, typ, p); err != nil {
		fw.broken = true
		logger.Printf("writing %s frame: %v (further output discarded)", proto.TypeName(typ), err)
	}
}

// exit writes the Exit frame, shortened if it would not fit in one frame.
func (fw *frameWriter) exit(e proto.Exit) {
	if b, err := json.Marshal(e); err == nil && len(b) > proto.MaxPayload-1024 {
		e.GoBuilds = nil
		e.Events = nil
		e.Error = truncate(e.Error, 4096)
	}
	fw.json(proto.TypeExit, e)
}

// ack tells the server how much input the job has taken (flow control).
func (fw *frameWriter) ack(total uint64) {
	fw.mu.Lock()
	defer fw.mu.Unlock()
	if fw.broken {
		return
	}
	if err := proto.WriteFrame(fw.w, proto.TypeAck, proto.EncodeAck(total)); err != nil {
		fw.broken = true
		logger.Printf("writing Ack frame: %v (further output discarded)", err)
	}
}

func (fw *frameWriter) json(typ byte, v any) {
	fw.mu.Lock()
	defer fw.mu.Unlock()
	if fw.broken {
		return
	}
	if err := proto.WriteJSON(fw.w, typ, v); err != nil {
		fw.broken = true
		logger.Printf("writing %s frame: %v (further output discarded)", proto.TypeName(typ), err)
	}
}

type frame struct {
	typ     byte
	payload []byte
	err     error // set on the last frame: io.EOF or a protocol/read error
}

func readFrames(r io.Reader, out chan<- frame) {
	fr := proto.NewReader(bufio.NewReaderSize(r, 64<<10))
	for {
		typ, p, err := fr.Next()
		if err != nil {
			out <- frame{err: err}
			close(out)
			return
		}
		out <- frame{typ: typ, payload: p}
	}
}

// run serves one job. With pre, a program is started ahead of the job and
// handed the job if it fits (see proto's Prestart).
func run(stdin io.Reader, stdout io.Writer, pre *proto.Prestart) int {
	// With SIGPIPE notified, a write to a vanished reader fails with EPIPE
	// instead of killing the supervisor (Go's default for fds 1 and 2).
	// Handled signals are reset to their defaults in the job by execve.
	sigs := make(chan os.Signal, 8)
	// TERM ends the job (docker stop); the others are passed on to it: an
	// engine's signal to the container reaches the job through its init and
	// this process.
	signal.Notify(sigs, unix.SIGPIPE, unix.SIGTERM, unix.SIGINT, unix.SIGHUP, unix.SIGQUIT, unix.SIGUSR1, unix.SIGUSR2)

	out := &frameWriter{w: stdout}
	out.json(proto.TypeHello, proto.Hello{Protocol: proto.Version, Supervisor: version, PID: os.Getpid()})

	var events []string
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		logger.Printf("PR_SET_CHILD_SUBREAPER: %v", err)
		events = append(events, "could not become a child subreaper: orphans of the job may escape")
	}

	var early *prestarted
	if pre != nil {
		var err error
		if early, err = startPrestart(*pre); err != nil {
			logger.Printf("no prestarted process: %v", err) // the job starts as usual
		}
	}

	frames := make(chan frame, 16)
	go readFrames(stdin, frames)

	fail := func(code int, msg string) int {
		if early != nil {
			early.end()
		}
		logger.Print(msg)
		out.exit(proto.Exit{ExitCode: code, Error: msg, Events: events})
		return code
	}
	var spec proto.Spec
	var received time.Time
wait:
	for {
		select {
		case f := <-frames:
			if f.err != nil {
				if f.err == io.EOF {
					return fail(codeBadSpec, "input ended before a job spec arrived")
				}
				return fail(codeBadSpec, fmt.Sprintf("reading the job spec: %v", f.err))
			}
			if f.typ != proto.TypeSpec {
				return fail(codeBadSpec, fmt.Sprintf("protocol error: %s frame before the job spec", proto.TypeName(f.typ)))
			}
			received = time.Now()
			var err error
			if spec, err = proto.DecodeSpec(f.payload); err != nil {
				return fail(codeBadSpec, err.Error())
			}
			break wait
		case sig := <-sigs:
			if sig == unix.SIGTERM || sig == unix.SIGINT || sig == unix.SIGHUP {
				return fail(codeBadSpec, fmt.Sprintf("stopped by %v before a job spec arrived", sig))
			}
		}
	}
	if spec.KillMode == proto.KillContainer {
		if why := containerModeRefusal(); why != "" {
			return fail(codeBadSpec, "kill_mode \"container\" refused: "+why)
		}
	}
	s := &super{spec: spec, out: out, frames: frames, sigs: sigs, received: received, events: events, early: early}
	figs := watchFigures(spec.Collect, out)
	exit := s.run()
	if spec.KillMode == proto.KillContainer {
		// A fresh sandbox: its processes are all gone, and what its go
		// commands built is read now (for the shared build cache).
		var caches []string
		for _, k := range []string{"GOCACHE", "GOPATH", "GOMODCACHE"} {
			if v := envValue(spec.Env, k); filepath.IsAbs(v) {
				caches = append(caches, filepath.Clean(v))
			}
		}
		exit.GoBuilds = collectGoBuilds(envValue(spec.Env, proto.GoBuildsEnv), caches, &exit.Events)
	}
	// What the job returns goes out once its processes are gone, before Exit.
	figs.finish(&exit.Events)
	collectFiles(spec.Collect, out, &exit.Events)
	exit.Stamps.Exit = time.Now().UnixNano()
	out.exit(exit)
	if spec.AwaitExitAck {
		awaitExitAck(frames)
	}
	// The container's exit code is the job's, so the engine's record agrees
	// with the Exit frame (and stands in for it if that frame is lost).
	return exit.ExitCode & 0xff
}

// awaitExitAck waits until the server acknowledges the Exit frame, its
// input ends, or proto.ExitAckWait passes (Spec.AwaitExitAck).
func awaitExitAck(frames <-chan frame) {
	t := time.NewTimer(proto.ExitAckWait)
	defer t.Stop()
	for {
		select {
		case f, ok := <-frames:
			if !ok || f.err != nil || f.typ == proto.TypeExitAck {
				return
			}
		case <-t.C:
			return
		}
	}
}

// super runs one job.
type super struct {
	spec     proto.Spec
	out      *frameWriter
	frames   <-chan frame
	sigs     <-chan os.Signal
	received time.Time
	events   []string

	pid     int
	started time.Time
	pty     *os.File // master side, with a TTY
	stdinQ  *stdinQueue
	outputs sync.WaitGroup
	closers []*os.File // our ends of the job's output, closed if draining stalls

	cgroupBase cgroupSnap
	useCgroup  bool

	early *prestarted // started before the job; taken by start() or discarded

	execAt      time.Time    // the job's process about to start (proto.Stamps)
	firstOutput atomic.Int64 // unix nanoseconds of the job's first output read (proto.Stamps)
}

func (s *super) event(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	logger.Print(msg)
	if len(s.events) < proto.MaxEvents {
		s.events = append(s.events, msg)
	}
}

type waitResult struct {
	status unix.WaitStatus
	at     time.Time
}

func (s *super) run() proto.Exit {
	if s.spec.KillMode == proto.KillContainer {
		s.cgroupBase = readCgroup(cgroupRoot)
		s.useCgroup = s.cgroupBase.hasCPU || s.cgroupBase.hasPeak
	}
	if code, err := s.start(); err != nil {
		s.event("%v", err)
		return proto.Exit{ExitCode: code, Error: err.Error(), Events: s.events}
	}
	mainDone := make(chan waitResult, 1)
	reaped := make(chan struct{})
	go reap(s.pid, mainDone, reaped)

	grace := time.Duration(s.spec.GraceMS) * time.Millisecond
	if grace == 0 {
		grace = proto.DefaultGraceMS * time.Millisecond
	}
	var deadlineC, graceC <-chan time.Time
	if s.spec.TimeoutMS > 0 {
		t := time.NewTimer(time.Until(s.received.Add(time.Duration(s.spec.TimeoutMS) * time.Millisecond)))
		defer t.Stop()
		deadlineC = t.C
	}
	terminate := func() {
		s.signalAll(unix.SIGTERM)
		if graceC == nil {
			graceC = time.After(grace)
		}
	}
	var timedOut, killed bool
	frames := s.frames
	var res waitResult
loop:
	for {
		select {
		case res = <-mainDone:
			break loop
		case f, ok := <-frames:
			if !ok {
				frames = nil
				continue
			}
			if f.err != nil && s.spec.KillOnDetach {
				killed = true
				s.event("server input ended (%v): killing the job (kill_on_detach)", f.err)
				s.killAll()
				frames = nil
				continue
			}
			if f.err != nil {
				if f.err == io.EOF {
					s.event("server input ended; the job keeps running")
				} else {
					s.event("server input unusable (%v); the job keeps running", f.err)
				}
				frames = nil
				continue
			}
			if f.typ == proto.TypeKill {
				killed = true
				s.event("kill requested")
				s.killAll()
				continue
			}
			s.handle(f)
		case <-deadlineC:
			deadlineC = nil
			timedOut = true
			s.event("deadline of %d ms reached: SIGTERM to the job, SIGKILL after %v", s.spec.TimeoutMS, grace)
			terminate()
		case <-graceC:
			graceC = nil
			s.event("grace period over: SIGKILL")
			s.killAll()
		case sig := <-s.sigs:
			if sig == unix.SIGPIPE {
				continue
			}
			if sig != unix.SIGTERM {
				s.signalJob(sig.(unix.Signal))
				continue
			}
			killed = true
			s.event("supervisor got %v: SIGTERM to the job, SIGKILL after %v", sig, grace)
			terminate()
		}
	}
	wall := res.at.Sub(s.started)

	// The main process has ended: nothing of the job may outlive it.
	if n := s.killAll(); n > 0 {
		s.event("killed %d leftover process(es) after the main process ended", n)
	}
	select {
	case <-reaped:
	case <-time.After(drainTimeout):
		s.event("some processes were not reaped in time")
	}
	s.stdinQ.stop()
	drained := make(chan struct{})
	go func() { s.outputs.Wait(); close(drained) }()
	select {
	case <-drained:
	case <-time.After(drainTimeout):
		s.event("job output still open %v after the job ended; stopped reading", drainTimeout)
		for _, f := range s.closers {
			f.Close()
		}
		<-drained
	}
	if s.pty != nil {
		s.pty.Close()
	}

	exit := proto.Exit{TimedOut: timedOut, Killed: killed, Stamps: proto.Stamps{
		Spec: s.received.UnixNano(), Exec: unixNano(s.execAt), Started: s.started.UnixNano(), FirstOutput: s.firstOutput.Load(),
		Exited: res.at.UnixNano(), Drained: time.Now().UnixNano()}}
	switch st := res.status; {
	case st.Exited():
		exit.ExitCode = st.ExitStatus()
	case st.Signaled():
		exit.ExitCode = 128 + int(st.Signal())
		exit.Signal = unix.SignalName(st.Signal())
	}
	exit.Usage, exit.OOMKilled = s.usage(wall)
	if d := s.stdinQ.droppedBytes(); d > 0 {
		s.event("stdin: %d byte(s) dropped: the job did not read them and the queue (%d bytes) was full", d, proto.MaxStdinQueue)
	}
	exit.Events = s.events
	return exit
}

// reap waits for every child (the job and the orphans reparented to the
// subreaper) until none is left, reporting the main process's status.
func reap(mainPID int, mainDone chan<- waitResult, done chan<- struct{}) {
	defer close(done)
	for {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, 0, nil)
		if err == unix.EINTR {
			continue
		}
		if err != nil { // ECHILD: no child left, so no descendant either
			return
		}
		if pid == mainPID {
			mainDone <- waitResult{status: ws, at: time.Now()}
		}
	}
}

// handle acts on one frame from the server while the job runs.
func (s *super) handle(f frame) {
	switch f.typ {
	case proto.TypeData:
		if s.stdinQ == nil {
			s.event("stdin is closed: %d byte(s) of input ignored", len(f.payload))
			return
		}
		s.stdinQ.push(f.payload)
	case proto.TypeEOF:
		if s.stdinQ == nil {
			return
		}
		if s.pty != nil {
			s.stdinQ.push([]byte{4}) // VEOF: a pty has no separate input to close
		} else {
			s.stdinQ.closeInput()
		}
	case proto.TypeSignal:
		name := strings.ToUpper(strings.TrimSpace(string(f.payload)))
		if !strings.HasPrefix(name, "SIG") {
			name = "SIG" + name
		}
		sig := unix.SignalNum(name)
		if sig == 0 {
			s.event("signal %q unknown; ignored", truncate(string(f.payload), 20))
			return
		}
		s.signalJob(sig)
	case proto.TypeResize:
		sz, err := proto.DecodeResize(f.payload)
		if err != nil {
			s.event("%v; ignored", err)
			return
		}
		if s.pty == nil {
			return
		}
		if err := ioctlFile(s.pty, func(fd int) error {
			return unix.IoctlSetWinsize(fd, unix.TIOCSWINSZ, &unix.Winsize{Row: sz.Rows, Col: sz.Cols})
		}); err != nil {
			s.event("resize: %v", err)
		}
	case proto.TypeSpec:
		s.event("second job spec ignored")
	default:
		s.event("unexpected %s frame ignored", proto.TypeName(f.typ))
	}
}

// signalJob delivers sig to the job's process group; with a TTY to the
// foreground process group of the pty (the job's shell may have moved
// another one to the foreground).
func (s *super) signalJob(sig unix.Signal) {
	pgid := s.pid
	if s.pty != nil {
		_ = ioctlFile(s.pty, func(fd int) error {
			pg, err := unix.IoctlGetInt(fd, unix.TIOCGPGRP)
			if err == nil && pg > 0 {
				pgid = pg
			}
			return err
		})
	}
	if err := unix.Kill(-pgid, sig); err != nil {
		if err2 := unix.Kill(s.pid, sig); err2 != nil && !errors.Is(err2, unix.ESRCH) {
			s.event("signal %v: %v", sig, err2)
		}
	}
}

func ioctlFile(f *os.File, fn func(fd int) error) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var ferr error
	if err := rc.Control(func(fd uintptr) { ferr = fn(int(fd)) }); err != nil {
		return err
	}
	return ferr
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

// unixNano is t as unix nanoseconds, 0 for the zero time.
func unixNano(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}
