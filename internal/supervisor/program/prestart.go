package program

import (
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/sandboxer/sandboxer/internal/supervisor/proto"
	"golang.org/x/sys/unix"
)

// prestarted is a program started before its job (see proto's Prestart):
// it waits on its control pipe for the job's argv, environment and working
// directory, with its stdio already on pipes the supervisor holds.
type prestarted struct {
	cfg  proto.Prestart
	path string   // argv[0] as resolved
	env  []string // its environment, PrestartFDEnv aside
	cwd  string
	pid  int
	// Our ends of its stdin, stdout, stderr and control pipes.
	stdin, stdout, stderr, ctl *os.File
}

// startPrestart starts cfg's program as a job would start (own process
// group, the container's environment and working directory), waiting for its job.
func startPrestart(cfg proto.Prestart) (*prestarted, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cwd, err := os.Getwd()
	if err != nil {
		return nil, err
	}
	env := os.Environ()
	path, _, err := lookPath(cfg.Argv[0], env, cwd)
	if err != nil {
		return nil, err
	}
	p := &prestarted{cfg: cfg, path: path, env: env, cwd: cwd}
	var child []*os.File // its ends: stdin, stdout, stderr, control
	defer func() {
		for _, f := range child {
			f.Close()
		}
	}()
	for i := 0; i < 4; i++ {
		r, w, err := os.Pipe()
		if err != nil {
			p.closeEnds()
			return nil, err
		}
		ours, theirs := w, r // stdin and control: it reads
		if i == 1 || i == 2 {
			ours, theirs = r, w
		}
		child = append(child, theirs)
		switch i {
		case 0:
			p.stdin = ours
		case 1:
			p.stdout = ours
		case 2:
			p.stderr = ours
		case 3:
			p.ctl = ours
		}
	}
	attr := &os.ProcAttr{
		Dir:   cwd,
		Env:   append(slices.Clip(env), proto.PrestartFDEnv+"="+strconv.Itoa(proto.PrestartFD)),
		Files: child,
		Sys:   &syscall.SysProcAttr{Setpgid: true},
	}
	proc, err := os.StartProcess(path, cfg.Argv, attr)
	if err != nil {
		p.closeEnds()
		return nil, fmt.Errorf("prestart %s: %v", truncate(cfg.Argv[0], 200), unwrapPath(err))
	}
	p.pid = proc.Pid
	proc.Release() // reaped by reap() once a job runs, or at the supervisor's end
	return p, nil
}

func (p *prestarted) closeEnds() {
	for _, f := range []*os.File{p.stdin, p.stdout, p.stderr, p.ctl} {
		if f != nil {
			f.Close()
		}
	}
}

// refusal says why the job sp (env and cwd as it would start) must not be
// handed to the prestarted process; "" when it can be.
func (p *prestarted) refusal(sp proto.Spec, env []string, cwd string) string {
	switch {
	case sp.TTY != nil:
		return "the job wants a terminal"
	case sp.Stdin != proto.StdinPipe:
		return "the job's stdin is closed"
	case len(sp.Rlimits) > 0:
		return "the job sets rlimits"
	case len(sp.Argv) < len(p.cfg.Argv) || !slices.Equal(sp.Argv[:len(p.cfg.Argv)], p.cfg.Argv):
		return "another command"
	}
	if path, _, err := lookPath(sp.Argv[0], env, cwd); err != nil || path != p.path {
		return "argv[0] resolves to another executable"
	}
	if name := earlyEnvDiff(p.cfg.EarlyEnv, p.cfg.LateEnv, p.env, env); name != "" {
		return "the job sets " + name + " differently"
	}
	if !running(p.pid) {
		return "the prestarted process has ended"
	}
	return ""
}

// earlyEnvDiff names a variable matching patterns, and not named by late,
// whose value (or absence) differs between a and b; "" when none does.
func earlyEnvDiff(patterns, late, a, b []string) string {
	ma, mb := envMap(a, patterns), envMap(b, patterns)
	for _, k := range late {
		delete(ma, k)
		delete(mb, k)
	}
	for k, v := range ma {
		if w, ok := mb[k]; !ok || w != v {
			return k
		}
	}
	for k := range mb {
		if _, ok := ma[k]; !ok {
			return k
		}
	}
	return ""
}

func envMap(env, patterns []string) map[string]string {
	m := map[string]string{}
	for _, kv := range env { // the last one wins, as in getenv
		k, v, _ := strings.Cut(kv, "=")
		if proto.EarlyEnvMatch(patterns, k) {
			m[k] = v
		}
	}
	return m
}

// running says whether pid runs (a zombie has ended).
func running(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 || i+2 >= len(b) {
		return false
	}
	st := b[i+2]
	return st != 'Z' && st != 'X' && st != 'x'
}

// discard kills the prestarted process group and closes its pipes.
func (p *prestarted) discard() {
	_ = unix.Kill(-p.pid, unix.SIGKILL)
	p.closeEnds()
}

// prestartReapWait bounds how long a supervisor that ends without a job
// waits for its killed prestarted process to die.
const prestartReapWait = 5 * time.Second

// end discards the prestarted process and reaps it, for a supervisor that
// ends without a job (no reap loop runs then): it does not outlive the
// supervisor's exit report.
func (p *prestarted) end() {
	p.discard()
	reaped := make(chan struct{})
	go func() {
		var ws unix.WaitStatus
		_, _ = unix.Wait4(p.pid, &ws, 0, nil)
		close(reaped)
	}()
	select {
	case <-reaped:
	case <-time.After(prestartReapWait):
		logger.Printf("the discarded prestarted process %d did not end within %s", p.pid, prestartReapWait)
	}
}

// take makes the prestarted process the job: it is handed the job's argv,
// environment and working directory, and its stdio is relayed from now on.
func (s *super) take(p *prestarted, sp proto.Spec, env []string, cwd string) {
	if env == nil {
		env = []string{}
	}
	msg, _ := json.Marshal(proto.PrestartJob{Argv: sp.Argv, Env: env, Cwd: cwd})
	// The program may still be starting: the write must not hold the job's start.
	go func() {
		if _, err := p.ctl.Write(msg); err != nil {
			logger.Printf("handing the job to the prestarted process: %v", err)
		}
		p.ctl.Close()
	}()
	s.pid = p.pid
	s.started = time.Now()
	s.out.json(proto.TypeStarted, proto.Started{PID: s.pid, StartedAt: s.started.UTC()})
	s.closers = append(s.closers, p.stdout, p.stderr)
	s.stdinQ = newStdinQueue(p.stdin, true, s.out.ack)
	s.relay(p.stdout, proto.TypeStdout)
	s.relay(p.stderr, proto.TypeStderr)
}
