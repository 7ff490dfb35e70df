package program

// The workspace daemon: a workspace container's main process. It takes job
// specs from the server over one long-lived stream (see the "Workspace
// daemon" section of internal/supervisor/proto) and runs each job under its
// own single-job supervisor (this binary with no arguments, kill mode
// "tree"), started ahead of the job so that a job costs no process start.
// Jobs outlive the server's stream: their output is kept for the next
// server, which re-attaches.

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"sync"
	"time"

	"github.com/sandboxer/sandboxer/internal/supervisor/proto"
	"golang.org/x/sys/unix"
)

// maxEndedJobs bounds the ended jobs kept for a server that has not said it
// stored their end (it may have died first); the oldest go first.
// endedRetainBytes is how much of the output of one of them, sent while a
// server was attached, stays kept.
const (
	maxEndedJobs     = 64
	endedRetainBytes = 256 << 10
)

// connectTimeout is how long connect waits for the daemon's socket (the
// container may have just started).
const connectTimeout = 10 * time.Second

func daemonMain() int {
	// The engine's init forwards a stop's SIGTERM here: the container stops
	// and every job with it, as before. A broken pipe is a write error, not
	// a death (notified, not ignored: an ignored signal stays ignored in
	// the jobs).
	signal.Notify(make(chan os.Signal, 1), unix.SIGPIPE)
	ln, err := net.Listen("unix", proto.DaemonSocket)
	if err != nil {
		logger.Printf("daemon: listen on %s: %v", proto.DaemonSocket, err)
		return 1
	}
	self, err := os.Executable()
	if err != nil {
		self = "/proc/self/exe"
	}
	d := &daemon{self: self, jobs: map[string]*djob{}, seeded: make(chan struct{})}
	d.started = sync.NewCond(&d.mu)
	go func() {
		// While the socket already answers; jobs wait for it (see start).
		if n, err := linkGoCacheSeeds(); err != nil {
			logger.Printf("daemon: linking the go build cache's seeds (%d linked): %v", n, err)
		}
		close(d.seeded)
	}()
	d.spare = d.spawn()
	for {
		c, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return 0
			}
			logger.Printf("daemon: accept: %v", err)
			time.Sleep(10 * time.Millisecond)
			continue
		}
		go d.serve(newDconn(c))
	}
}

// connectMain pipes stdin/stdout (the server's exec) to the daemon's socket.
func connectMain(stdin io.Reader, stdout io.Writer) int {
	var conn net.Conn
	var err error
	for end := time.Now().Add(connectTimeout); ; time.Sleep(20 * time.Millisecond) {
		if conn, err = net.Dial("unix", proto.DaemonSocket); err == nil || time.Now().After(end) {
			break
		}
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "connect: the workspace's supervisor daemon does not answer: %v\n", err)
		return 1
	}
	defer conn.Close()
	go func() {
		_, _ = io.Copy(stdout, conn)
		// The daemon went (the container is stopping): so do we.
		os.Exit(0)
	}()
	_, _ = io.Copy(conn, stdin)
	// The server's end closed (it stopped or died): the daemon detaches its jobs.
	return 0
}

type daemon struct {
	self string

	mu       sync.Mutex
	jobs     map[string]*djob
	ended    []string      // keys of ended jobs, oldest first
	seeded   chan struct{} // closed once the go build cache's seeds are linked
	spare    *child        // started, waiting for its spec
	starting bool          // the next spare is being started
	started  *sync.Cond    // on mu: starting ended
}

// child is a single-job supervisor started by the daemon.
type child struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stdout io.ReadCloser
	err    error // it could not be started
}

func (d *daemon) spawn() *child {
	cmd := exec.Command(d.self)
	cmd.Env = append(os.Environ(), clone3Env+"=1") // its filter is the daemon's
	cmd.Stderr = os.Stderr
	ch := &child{cmd: cmd}
	if ch.stdin, ch.err = cmd.StdinPipe(); ch.err != nil {
		return ch
	}
	if ch.stdout, ch.err = cmd.StdoutPipe(); ch.err != nil {
		return ch
	}
	ch.err = cmd.Start()
	return ch
}

// takeSpare hands out the waiting supervisor (one still being started is
// waited for: that costs less than starting another).
func (d *daemon) takeSpare() *child {
	d.mu.Lock()
	for d.spare == nil && d.starting {
		d.started.Wait()
	}
	ch := d.spare
	d.spare = nil
	d.mu.Unlock()
	if ch == nil || ch.err != nil {
		ch = d.spawn()
	}
	return ch
}

// seedWait bounds how long a job waits for the seeds' linking.
const seedWait = 60 * time.Second

// refillAfter is when the next spare starts if the job that took the last
// one still runs: a short job ends first and the spare starts then, so its
// start (a Go runtime's, several ms of CPU) never competes with the job
// under the workspace's CPU quota.
const refillAfter = 30 * time.Millisecond

// refill starts the next spare supervisor unless one waits or is starting.
func (d *daemon) refill() {
	d.mu.Lock()
	if d.spare != nil || d.starting {
		d.mu.Unlock()
		return
	}
	d.starting = true
	d.mu.Unlock()
	go func() {
		next := d.spawn()
		d.mu.Lock()
		d.spare, d.starting = next, false
		d.started.Broadcast()
		d.mu.Unlock()
	}()
}

// dconn is one server stream. Frames are queued and written by their own
// goroutine, so that no job waits for a slow or vanished reader while it
// holds its lock; a queue past maxQueued means the reader is gone.
type dconn struct {
	c      net.Conn
	mu     sync.Mutex
	more   *sync.Cond
	q      [][]byte
	queued int
	closed bool
}

// maxQueued bounds the frames waiting for a stream's reader (a replay of a
// detached job's DaemonDetachedBytes included).
const maxQueued = 32 << 20

func newDconn(c net.Conn) *dconn {
	dc := &dconn{c: c}
	dc.more = sync.NewCond(&dc.mu)
	go dc.writer()
	return dc
}

// write queues one frame.
func (c *dconn) write(frame []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return
	}
	if c.queued+len(frame) > maxQueued {
		c.closeLocked()
		return
	}
	c.q = append(c.q, frame)
	c.queued += len(frame)
	c.more.Signal()
}

func (c *dconn) closeLocked() {
	if !c.closed {
		c.closed = true
		c.c.Close()
		c.more.Broadcast()
	}
}

func (c *dconn) close() {
	c.mu.Lock()
	c.closeLocked()
	c.mu.Unlock()
}

func (c *dconn) writer() {
	for {
		c.mu.Lock()
		for len(c.q) == 0 && !c.closed {
			c.more.Wait()
		}
		if c.closed {
			c.mu.Unlock()
			return
		}
		f := c.q[0]
		c.q[0] = nil
		c.q = c.q[1:]
		c.queued -= len(f)
		c.mu.Unlock()
		if _, err := c.c.Write(f); err != nil {
			c.close()
			return
		}
	}
}

func (c *dconn) mux(key string, typ byte, p []byte) {
	if f, err := proto.AppendMux(nil, key, typ, p); err == nil {
		c.write(f)
	}
}

func (d *daemon) serve(c *dconn) {
	defer c.close()
	hello, _ := json.Marshal(proto.Hello{Protocol: proto.Version, Supervisor: version, PID: os.Getpid()})
	if f, err := proto.AppendFrame(nil, proto.TypeHello, hello); err == nil {
		c.write(f)
	}
	defer d.detach(c)
	fr := proto.NewReader(bufio.NewReaderSize(c.c, 64<<10))
	for {
		typ, p, err := fr.Next()
		if err != nil {
			return
		}
		switch typ {
		case proto.TypeMux:
			key, t, payload, err := proto.DecodeMux(p)
			if err != nil {
				logger.Printf("daemon: %v", err)
				return
			}
			if t == proto.TypeSpec {
				d.start(c, key, payload)
			} else if j := d.job(key); j != nil {
				j.toChild(t, payload)
			}
		case proto.TypeAttach:
			var a proto.Attach
			if json.Unmarshal(p, &a) != nil || a.Key == "" {
				continue
			}
			answer := proto.TypeUnknown
			if j := d.job(a.Key); j != nil {
				j.attach(c, a)
				answer = proto.TypeAttach
			}
			if f, err := proto.AppendFrame(nil, answer, []byte(a.Key)); err == nil {
				c.write(f)
			}
		case proto.TypeForget:
			d.forget(string(p))
		}
	}
}

func (d *daemon) job(key string) *djob {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.jobs[key]
}

// detach leaves the jobs of a stream that ended running, for the next server.
func (d *daemon) detach(c *dconn) {
	d.mu.Lock()
	jobs := make([]*djob, 0, len(d.jobs))
	for _, j := range d.jobs {
		jobs = append(jobs, j)
	}
	d.mu.Unlock()
	for _, j := range jobs {
		j.mu.Lock()
		if j.conn == c {
			j.conn = nil
		}
		j.mu.Unlock()
	}
}

func (d *daemon) forget(key string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if j := d.jobs[key]; j != nil && j.isEnded() {
		delete(d.jobs, key)
	}
}

// start runs a job on a new channel.
func (d *daemon) start(c *dconn, key string, spec []byte) {
	d.mu.Lock()
	_, dup := d.jobs[key]
	d.mu.Unlock()
	if dup {
		e, _ := json.Marshal(proto.Exit{ExitCode: codeBadSpec, Error: "a job with this key already runs in the workspace"})
		c.mux(key, proto.TypeExit, e)
		return
	}
	// A go job that started before the seeds were linked would build the
	// standard library anew (correct, but minutes): the first jobs of a new
	// workspace wait for the links instead, bounded. (This holds the stream's
	// reader, only in a new workspace's first seconds, when nothing else
	// runs on it.)
	select {
	case <-d.seeded:
	case <-time.After(seedWait):
	}
	ch := d.takeSpare()
	time.AfterFunc(refillAfter, d.refill)
	j := &djob{key: key, d: d, child: ch, conn: c, in: make(chan []byte, 64), exited: make(chan struct{})}
	j.cond = sync.NewCond(&j.mu)
	if ch.err != nil {
		msg := fmt.Sprintf("cannot start the job's supervisor: %v", ch.err)
		logger.Print("daemon: " + msg)
		e, _ := json.Marshal(proto.Exit{ExitCode: codeCannotExec, Error: msg})
		c.mux(key, proto.TypeExit, e)
		return
	}
	d.mu.Lock()
	d.jobs[key] = j
	d.mu.Unlock()
	go j.feed()
	go j.relay()
	j.toChild(proto.TypeSpec, spec)
}

// djob is one job: its supervisor, where its frames go, and what is kept of them.
type djob struct {
	key   string
	d     *daemon
	child *child
	in    chan []byte // frames for the supervisor's stdin

	mu     sync.Mutex
	cond   *sync.Cond // a stream attached, or the job ended
	conn   *dconn     // nil while no server is attached
	kept   []keptFrame
	bytes  int      // payload bytes in kept
	seen   [3]int64 // output bytes so far, by stream (1 stdout, 2 stderr)
	ended  bool     // the Exit frame came
	exited chan struct{}
}

// keptFrame is a frame the job's supervisor wrote; off is where an output
// frame's payload starts in its stream.
type keptFrame struct {
	typ     byte
	payload []byte
	off     int64
}

func (j *djob) isEnded() bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.ended
}

// toChild queues a frame for the supervisor's stdin.
func (j *djob) toChild(typ byte, p []byte) {
	f, err := proto.AppendFrame(nil, typ, p)
	if err != nil {
		return
	}
	select {
	case j.in <- f:
	case <-j.exited:
	}
}

// feed writes queued frames to the supervisor's stdin. The stdin stays open
// when a server goes: the next one may still kill or signal the job.
func (j *djob) feed() {
	for {
		select {
		case f := <-j.in:
			if _, err := j.child.stdin.Write(f); err != nil {
				<-j.exited
				return
			}
		case <-j.exited:
			j.child.stdin.Close()
			return
		}
	}
}

// relay reads the supervisor's frames until it ends, keeping them and
// passing them to the attached server.
func (j *djob) relay() {
	fr := proto.NewReader(bufio.NewReaderSize(j.child.stdout, 64<<10))
	for {
		typ, p, err := fr.Next()
		if err != nil {
			break
		}
		j.add(typ, p)
		if typ == proto.TypeExit {
			j.d.refill() // the Exit went on first
		}
	}
	werr := j.child.cmd.Wait()
	if !j.isEnded() {
		code := -1
		var ee *exec.ExitError
		if errors.As(werr, &ee) {
			code = ee.ExitCode()
		}
		e, _ := json.Marshal(proto.Exit{ExitCode: code, Error: fmt.Sprintf("the job's supervisor ended without a report (%v)", werr)})
		j.add(proto.TypeExit, e)
	}
	close(j.exited)
	d := j.d
	d.mu.Lock()
	d.ended = append(d.ended, j.key)
	for len(d.ended) > maxEndedJobs {
		if old := d.jobs[d.ended[0]]; old != nil && old.isEnded() {
			delete(d.jobs, d.ended[0])
		}
		d.ended = d.ended[1:]
	}
	d.mu.Unlock()
}

// add keeps one frame and sends it on; with no server attached and
// DaemonDetachedBytes kept, it waits (the job's output waits in its pipe).
func (j *djob) add(typ byte, p []byte) {
	j.mu.Lock()
	defer j.mu.Unlock()
	for j.conn == nil && j.bytes >= proto.DaemonDetachedBytes {
		j.cond.Wait()
	}
	k := keptFrame{typ: typ, payload: p}
	switch typ {
	case proto.TypeStdout:
		k.off = j.seen[1]
		j.seen[1] += int64(len(p))
	case proto.TypeStderr:
		k.off = j.seen[2]
		j.seen[2] += int64(len(p))
	case proto.TypeExit:
		j.ended = true
	}
	if typ != proto.TypeAck {
		j.kept = append(j.kept, k)
		j.bytes += len(p)
	}
	if j.conn != nil {
		j.conn.mux(j.key, typ, p)
		limit := proto.DaemonRetainBytes
		if j.ended {
			// Sent whole: only what may still be in flight is kept, so the
			// ended jobs kept for a server's sake stay small.
			limit = endedRetainBytes
		}
		for j.bytes > limit && len(j.kept) > 1 {
			j.bytes -= len(j.kept[0].payload)
			j.kept = j.kept[1:]
		}
	}
}

// attach routes the job to stream c, replaying what the server lacks: the
// output past the byte counts it has, the start and the end.
func (j *djob) attach(c *dconn, a proto.Attach) {
	j.mu.Lock()
	defer j.mu.Unlock()
	have := [3]int64{1: a.Stdout, 2: a.Stderr}
	for _, k := range j.kept {
		p := k.payload
		if s := streamOf(k.typ); s != 0 {
			if skip := have[s] - k.off; skip >= int64(len(p)) {
				continue
			} else if skip > 0 {
				p = p[skip:]
			}
		}
		c.mux(j.key, k.typ, p)
	}
	j.conn = c
	j.cond.Broadcast()
}

func streamOf(typ byte) int {
	switch typ {
	case proto.TypeStdout:
		return 1
	case proto.TypeStderr:
		return 2
	}
	return 0
}
