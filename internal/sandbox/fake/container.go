package fake

import (
	"context"
	"errors"
	"github.com/sandboxer/sandboxer/internal/hardening"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sandboxer/sandboxer/internal/sandbox"
	"github.com/sandboxer/sandboxer/internal/supervisor/proto"
)

// chunk is one write of the process, as the engine's log keeps it.
type chunk struct {
	stream sandbox.Stream
	data   []byte
}

// container is one fake sandbox: its script's process and its log.
type container struct {
	eng       *Engine
	info      sandbox.Container // Running is filled in by List
	seq       int
	prog      program
	script    string // what prog was parsed from (a checkpoint's image keeps it)
	command   string // its command line, as Processes shows it
	fs        *files // its files (a workspace's volume is shared)
	engineLog bool
	image     string   // what it was made from (ImagesInUse)
	network   string   // as its spec named it
	env       []string // its process's variables (curl reads the proxy's)
	uid       string   // what id -u says
	reach     reach    // what its curl can connect to
	profile   profile  // its hardening, as its kernel shows it
	cpus      int64    // the room it holds on a node of SetCapacity's while it has not ended

	mu         sync.Mutex
	log        []chunk
	wake       chan struct{} // closed and replaced whenever log or state changes
	running    bool
	ended      bool
	exitCode   int
	oom        bool
	startedAt  time.Time
	finishedAt time.Time

	// pc is the statement the script is at; resumeAt where a restored
	// copy starts (a checkpoint's image keeps pc).
	pc, resumeAt int

	// thawed is nil, or while the container is frozen a channel closed
	// when it thaws: its script runs no further statement until then.
	thawed chan struct{}

	exited   chan struct{} // closed when the process has ended (or was removed before it ran)
	killCh   chan struct{}
	killOnce sync.Once
	sigs     chan int
	stdin    *pipe
	// jobFiles are written to fs before the job runs, as the supervisor
	// writes a spec's files (a base file of an image the fake has not got
	// adds nothing).
	jobFiles []proto.File
	// collect and returned: what the job returns, gathered from fs when it
	// ends, as the supervisor does (proto.Collect).
	collect  *proto.Collect
	returned []proto.ReturnedFile
}

func newContainer(e *Engine, info sandbox.Container, spec sandbox.Spec, seq int) *container {
	c := &container{
		eng: e, info: info, seq: seq, prog: parse(scriptOf(spec.Cmd)), script: scriptOf(spec.Cmd), command: strings.Join(spec.Cmd, " "), fs: newFiles(),
		engineLog: spec.EngineLog != "none",
		wake:      make(chan struct{}),
		exited:    make(chan struct{}),
		killCh:    make(chan struct{}),
		sigs:      make(chan int, 16),
		stdin:     newPipe(),
		jobFiles:  spec.Files,
		collect:   spec.Collect,
		image:     spec.Image,
		network:   spec.Network,
		env:       spec.Env,
		uid:       "1000",
		profile:   newProfile(spec, seq),
		cpus:      cpusOf(spec),
	}
	if !spec.OpenStdin {
		c.stdin.closeWrite() // stdin closed at start: the process reads end-of-file
	}
	return c
}

func (c *container) notifyLocked() {
	close(c.wake)
	c.wake = make(chan struct{})
}

func (c *container) isRunning() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.running
}

func (c *container) logLen() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.log)
}

// start runs the script in its own goroutine.
func (c *container) start() {
	c.mu.Lock()
	c.running = true
	c.startedAt = time.Now()
	c.mu.Unlock()
	go c.run()
}

// kill ends the process with SIGKILL; a container that never started just ends.
func (c *container) kill() {
	c.killOnce.Do(func() { close(c.killCh) })
	c.mu.Lock()
	notStarted := !c.running && !c.ended
	c.mu.Unlock()
	if notStarted {
		c.end(137, false)
	}
}

func (c *container) signal(n int) {
	if n == 9 {
		c.kill()
		return
	}
	select {
	case c.sigs <- n:
	default: // a flood of signals: the process has enough to act on
	}
}

func (c *container) write(s sandbox.Stream, p string) {
	if p == "" {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.log = append(c.log, chunk{stream: s, data: []byte(p)})
	c.notifyLocked()
}

func (c *container) end(code int, oom bool) {
	c.mu.Lock()
	if c.ended {
		c.mu.Unlock()
		return
	}
	c.ended, c.running = true, false
	c.exitCode, c.oom = code, oom
	c.finishedAt = time.Now()
	c.notifyLocked()
	c.mu.Unlock()
	c.stdin.readerGone()
	close(c.exited)
	c.eng.roomChanged()
}

// hasEnded says whether c's process has ended (it holds no room then).
func (c *container) hasEnded() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ended
}

// errEnded unwinds the interpreter when the process has been ended by a signal.
type errEnded struct{ code int }

func (e errEnded) Error() string { return "ended" }

// interrupted returns the code the process ends with when a kill or a signal
// it does not ignore is pending (checked between and during statements).
func (c *container) interrupted(ignored map[int]bool) (int, bool) {
	for {
		select {
		case <-c.killCh:
			return 137, true
		case n := <-c.sigs:
			if !ignored[n] {
				return 128 + n, true
			}
			continue
		default:
			return 0, false
		}
	}
}

// block waits for ch, a kill, or a signal the process does not ignore.
func (c *container) block(ch <-chan struct{}, ignored map[int]bool) error {
	for {
		select {
		case <-ch:
			return nil
		case <-c.killCh:
			return errEnded{137}
		case n := <-c.sigs:
			if !ignored[n] {
				return errEnded{128 + n}
			}
		}
	}
}

func (c *container) run() {
	for _, f := range c.jobFiles {
		_ = c.fs.write(f.Path, string(f.Content), false) // a read-only target: the supervisor reports it; the fake goes on
	}
	code, oom := c.interpret()
	returned := c.fs.collect(c.collect)
	c.mu.Lock()
	c.returned = returned
	c.mu.Unlock()
	c.end(code, oom)
}

// freeze stops the script before its next statement, until thaw.
func (c *container) freeze() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.thawed == nil {
		c.thawed = make(chan struct{})
	}
}

func (c *container) thaw() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.thawed != nil {
		close(c.thawed)
		c.thawed = nil
	}
}

func (c *container) frozen() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.thawed != nil
}

// waitThawed blocks while the container is frozen (a kill still ends it:
// the engines thaw a container to remove it).
func (c *container) waitThawed() {
	c.mu.Lock()
	ch := c.thawed
	c.mu.Unlock()
	if ch == nil {
		return
	}
	select {
	case <-ch:
	case <-c.killCh:
	}
}

func (c *container) interpret() (code int, oom bool) {
	if c.prog.syntaxErr != "" {
		c.write(sandbox.Stderr, c.prog.syntaxErr+"\n")
		return 2, false
	}
	ignored := map[int]bool{}
	status := 0
	for i := c.resumeAt; i < len(c.prog.ops); i++ {
		o := c.prog.ops[i]
		c.mu.Lock()
		c.pc = i
		c.mu.Unlock()
		c.waitThawed()
		if code, ok := c.interrupted(ignored); ok {
			return code, false
		}
		if (o.cond == "&&" && status != 0) || (o.cond == "||" && status == 0) {
			continue
		}
		stream := sandbox.Stdout
		if o.stderr {
			stream = sandbox.Stderr
		}
		var err error
		status = 0
		if o.toFile != "" {
			// The redirection makes (or empties) the file first.
			if err := c.fs.write(o.toFile, "", o.append); err != nil {
				c.write(sandbox.Stderr, "bash: "+o.toFile+": "+err.Error()+"\n")
				status = 1
				continue
			}
		}
		emit := func(p string) {
			if o.toFile != "" {
				_ = c.fs.write(o.toFile, p, true)
				return
			}
			c.write(stream, p)
		}
		switch o.name {
		case "echo":
			args, nl := o.args, "\n"
			if len(args) > 0 && args[0] == "-n" {
				args, nl = args[1:], ""
			}
			emit(strings.Join(args, " ") + nl)
		case "printf":
			if len(o.args) > 0 {
				emit(strings.NewReplacer(`\n`, "\n", `\t`, "\t", `\\`, `\`).Replace(o.args[0]))
			}
		case "sleep":
			elapsed := make(chan struct{})
			t := time.AfterFunc(o.dur, func() { close(elapsed) })
			err = c.block(elapsed, ignored)
			t.Stop()
		case "exit":
			return o.code, false
		case "oom":
			return 137, true
		case "cat":
			if len(o.args) == 0 {
				err = c.cat(stream, ignored)
				break
			}
			for _, name := range o.args {
				if data, ok := c.readFile(name); ok {
					emit(data)
				} else {
					c.write(sandbox.Stderr, "cat: "+name+": No such file or directory\n")
					status = 1
				}
			}
		case "trap":
			if len(o.args) > 1 {
				for _, s := range o.args[1:] {
					if n, ok := signalNumber(s); ok && n != 9 {
						ignored[n] = o.args[0] == ""
					}
				}
			}
		case "seq":
			// Written in chunks of about 64 KiB, as a pipe would carry them.
			var b []byte
			for n := o.first; n <= o.last; n++ {
				b = strconv.AppendInt(b, int64(n), 10)
				b = append(b, '\n')
				if len(b) >= 64<<10 {
					emit(string(b))
					b = b[:0]
				}
			}
			if len(b) > 0 {
				emit(string(b))
			}
		case "false":
			status = 1
		case "curl":
			status, err = c.curl(o.args, emit, ignored)
		case "id":
			emit(c.uid + "\n")
		case "probe":
			emit(string(hardening.Read(kernel{c}, c.profile.workdir).Marshal()) + "\n")
		case "fail":
			c.write(sandbox.Stderr, o.args[0]+"\n")
			status = o.code
		}
		var ended errEnded
		if errors.As(err, &ended) {
			return ended.code, false
		}
	}
	return status, false
}

// readFile is a file as the process sees it: its files, and the kernel's
// route table.
func (c *container) readFile(name string) (string, bool) {
	if s, ok := c.profile.kernelFile(abs(name), c.reach.routed); ok {
		return s, true
	}
	return c.fs.read(name)
}

// getenv is the process's variable key.
func (c *container) getenv(key string) string {
	for i := len(c.env) - 1; i >= 0; i-- {
		if v, ok := strings.CutPrefix(c.env[i], key+"="); ok {
			return v
		}
	}
	return ""
}

func (c *container) cat(stream sandbox.Stream, ignored map[int]bool) error {
	for {
		data, eof, wait := c.stdin.read()
		if len(data) > 0 {
			c.write(stream, string(data))
			continue
		}
		if eof {
			return nil
		}
		if err := c.block(wait, ignored); err != nil {
			return err
		}
	}
}

// pipe is a container's stdin: a bounded buffer between WriteStdin and the script.
type pipe struct {
	mu      sync.Mutex
	buf     []byte
	eof     bool // the writer closed it
	gone    bool // the process ended: writes fail
	changed chan struct{}
}

func newPipe() *pipe { return &pipe{changed: make(chan struct{})} }

func (p *pipe) notifyLocked() {
	close(p.changed)
	p.changed = make(chan struct{})
}

// read takes what is buffered; with nothing buffered it says whether that is
// end-of-file, or returns a channel closed when something changes.
func (p *pipe) read() (data []byte, eof bool, wait <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.buf) > 0 {
		data, p.buf = p.buf, nil
		p.notifyLocked()
		return data, false, nil
	}
	return nil, p.eof, p.changed
}

var errStdinClosed = errors.New("write stdin: broken pipe")

// write blocks while the buffer is full, until the process reads, ends, or ctx ends.
func (p *pipe) write(ctx context.Context, b []byte) (int, error) {
	n := 0
	for {
		p.mu.Lock()
		if p.gone || p.eof {
			p.mu.Unlock()
			return n, errStdinClosed
		}
		if room := stdinBuffer - len(p.buf); room > 0 {
			k := min(room, len(b))
			p.buf = append(p.buf, b[:k]...)
			n, b = n+k, b[k:]
			p.notifyLocked()
		}
		if len(b) == 0 {
			p.mu.Unlock()
			return n, nil
		}
		ch := p.changed
		p.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return n, ctx.Err()
		}
	}
}

func (p *pipe) closeWrite() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.eof {
		p.eof = true
		p.notifyLocked()
	}
}

func (p *pipe) readerGone() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.gone = true
	p.notifyLocked()
}
