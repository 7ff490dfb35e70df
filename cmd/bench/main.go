// Command bench measures sandboxer (over MCP stdio, as an agent sees it)
// against baselines measured in the same run: a bare host process, a raw
// `docker run --rm` and a raw `docker exec` into a running container. It runs
// two servers: one with the default warm pool, one with the pool off. It
// prints latencies (p50, p95), throughput (jobs per second, sequential and
// concurrent), the server's memory and the ratios, each beside its goal. It
// prints figures, not verdicts: nothing here fails on a missed goal.
//
// Progress goes to stderr, the report to stdout. Everything the bench starts
// (servers, containers, temporary directories) is gone when it returns.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"maps"
	"math"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/sandboxer/sandboxer/images"
	"github.com/sandboxer/sandboxer/internal/config"
	"github.com/sandboxer/sandboxer/internal/gobuild"
	"github.com/sandboxer/sandboxer/internal/sandbox"
	"github.com/sandboxer/sandboxer/internal/sandbox/docker"
)

type options struct {
	bin        string
	runs       int           // latency samples per case
	dockerRuns int           // docker run --rm samples (latency and serial jobs/s)
	seq        int           // sequential jobs, pool on
	conc       int           // concurrent jobs, pool on
	callers    int           // concurrent callers
	seqOff     int           // sequential jobs, pool off
	concOff    int           // concurrent jobs, pool off
	maxJobs    int           // jobs.max_concurrent of both servers
	settle     time.Duration // pause after the pool is full, before a measured call
	spacing    time.Duration // -only warm: pause between calls (the pool refills)
	warmPolicy string        // -only warm: the server's policy file ("" = the default policy)
	trace      bool
	only       string // run one part alone: "gosuites", "project", "http", "engines" or "workspace"
}

func main() {
	var o options
	flag.StringVar(&o.bin, "bin", "bin/sandboxer", "sandboxer binary")
	flag.IntVar(&o.runs, "runs", 20, "measured runs per latency case (after one warm-up)")
	flag.IntVar(&o.dockerRuns, "docker-runs", 20, "docker run --rm runs (latency and serial jobs/s baseline)")
	flag.IntVar(&o.seq, "seq", 200, "sequential trivial jobs, pool on")
	flag.IntVar(&o.conc, "conc", 100, "trivial jobs from concurrent callers, pool on")
	flag.IntVar(&o.callers, "callers", 8, "concurrent callers")
	flag.IntVar(&o.seqOff, "seq-off", 50, "sequential trivial jobs, pool off (0 = skip)")
	flag.IntVar(&o.concOff, "conc-off", 50, "trivial jobs from concurrent callers, pool off (0 = skip)")
	flag.IntVar(&o.maxJobs, "max-jobs", 8, "jobs.max_concurrent of both servers (SANDBOXER_MAX_JOBS), so 8 jobs can run at once")
	flag.DurationVar(&o.settle, "settle", 50*time.Millisecond, "pause once the pool is full before a measured warm call")
	flag.StringVar(&o.only, "only", "", "run one part alone: core (the baselines, the pool on and off), gosuites, project, http, engines, workspace, features, kubernetes, secrets, load, templates, pause, hibernate (gVisor with checkpoints), traces, listen (subscriptions/listen's latency), e2b (the E2B API with the e2b SDK against MCP), or warm (warm true alone, for older binaries: git bisect)")
	flag.DurationVar(&o.spacing, "spacing", 600*time.Millisecond, "-only warm: pause before each call, for the pool to refill")
	flag.StringVar(&o.warmPolicy, "warm-policy", "", "-only warm: the server's policy file (default: none, the default policy)")
	flag.BoolVar(&o.trace, "trace", false, "also print where the time of a warm call goes (from the job's timestamps)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, o)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "bench: "+format+"\n", args...)
}

// stats are the samples of one case.
type stats []time.Duration

func (s stats) pct(p float64) time.Duration {
	if len(s) == 0 {
		return 0
	}
	d := append(stats(nil), s...)
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	i := int(math.Ceil(p*float64(len(d)))) - 1
	return d[max(0, min(i, len(d)-1))]
}
func (s stats) p50() time.Duration { return s.pct(0.50) }
func (s stats) p95() time.Duration { return s.pct(0.95) }

// sample runs f once to warm up (unless warm is false), then n times.
func sample(n int, warmup bool, f func() error) (stats, error) {
	if warmup {
		if err := f(); err != nil {
			return nil, err
		}
	}
	var s stats
	for i := 0; i < n; i++ {
		start := time.Now()
		if err := f(); err != nil {
			return nil, err
		}
		s = append(s, time.Since(start))
	}
	return s, nil
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// server is one sandboxer serve process driven over MCP stdio.
type server struct {
	name     string
	c        *client.Client
	cmd      *exec.Cmd
	stateDir string
	instance string // its containers' dev.sandboxer.instance label
	rt       *docker.Runtime
	logPath  string
	// closeExtra closes the server's log and removes its temporary directory.
	closeExtra func()
}

// startServer starts a server; policyYAML ("" for none) is its policy file.
// extraEnv is added to the server's environment (a remote engine's variables).
func startServer(ctx context.Context, o options, name string, policyYAML string, extraEnv ...string) (*server, error) {
	dir, err := os.MkdirTemp("", "sandboxer-bench-"+name+"-")
	if err != nil {
		return nil, err
	}
	s := &server{name: name, stateDir: filepath.Join(dir, "state")}
	level := "warn"
	if name == hibernateName || name == e2bName {
		level = "info" // its checkpoints' figures, the E2B listener's address: the server's log lines
	}
	if o.trace {
		level = "debug" // the server logs each call's timeline (docs/benchmark.md)
	}
	args := []string{"serve", "--state-dir", s.stateDir, "--log-level", level}
	if policyYAML != "" {
		pol := filepath.Join(dir, "policy.yaml")
		if err := os.WriteFile(pol, []byte(policyYAML), 0o644); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		args = append(args, "--policy", pol)
	}
	s.logPath = filepath.Join(dir, "server.log")
	logf, err := os.Create(s.logPath)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	env := append([]string{"SANDBOXER_MAX_JOBS=" + strconv.Itoa(o.maxJobs)}, extraEnv...)
	cmdFunc := func(_ context.Context, command string, env []string, args []string) (*exec.Cmd, error) {
		// Not tied to a context: Close ends it (stdin closed, then signals).
		cmd := exec.Command(command, args...)
		cmd.Env = append(os.Environ(), env...)
		cmd.Stderr = logf
		s.cmd = cmd
		return cmd, nil
	}
	c, err := client.NewStdioMCPClientWithOptions(o.bin, env, args, transport.WithCommandFunc(cmdFunc))
	if err != nil {
		logf.Close()
		os.RemoveAll(dir)
		return nil, err
	}
	s.c = c
	// From here on, close cleans up.
	cleanupDir := func() { logf.Close(); os.RemoveAll(dir) }
	s.closeExtra = cleanupDir
	init := mcp.InitializeRequest{}
	init.Params.ProtocolVersion = mcp.LATEST_PROTOCOL_VERSION
	init.Params.ClientInfo = mcp.Implementation{Name: "bench", Version: "1"}
	if _, err := c.Initialize(ctx, init); err != nil {
		s.close()
		return nil, fmt.Errorf("%s server: initialize: %w (log: %s)", name, err, tail(s.logPath))
	}
	s.instance = (&config.Config{StateDir: s.stateDir}).Instance()
	s.rt, err = docker.New(s.instance)
	if err != nil {
		s.close()
		return nil, err
	}
	return s, nil
}

func tail(path string) string {
	b, _ := os.ReadFile(path)
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return strings.TrimSpace(string(b))
}

// close stops the server (which drains its pool), then removes whatever of
// its instance is still on the engine and its temporary directory.
func (s *server) close() {
	if s.c != nil {
		_ = s.c.Close()
	}
	if s.rt != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		left, err := s.rt.List(ctx)
		if err == nil && len(left) > 0 {
			progress("%s server left %d containers behind; removing them", s.name, len(left))
			for _, c := range left {
				_ = s.rt.Remove(ctx, c.ID)
			}
		}
		// Its shared Go build cache goes too: each bench server is an
		// instance of its own, and the engine is shared.
		vols, _ := s.rt.ListVolumes(ctx, gobuild.LabelTenant)
		for _, v := range vols {
			_ = s.rt.RemoveVolume(ctx, v.Name)
		}
		cancel()
		_ = s.rt.Close()
	}
	if s.closeExtra != nil {
		s.closeExtra()
	}
}

func (s *server) call(ctx context.Context, name string, args map[string]any) (map[string]any, error) {
	req := mcp.CallToolRequest{}
	req.Params.Name = name
	req.Params.Arguments = args
	res, err := s.c.CallTool(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if res.IsError {
		return nil, fmt.Errorf("%s failed: %v", name, res.Content)
	}
	m, ok := res.StructuredContent.(map[string]any)
	if !ok {
		// Some clients hand structured content back as raw JSON.
		b, _ := json.Marshal(res.StructuredContent)
		if err := json.Unmarshal(b, &m); err != nil {
			return nil, fmt.Errorf("%s: no structured result", name)
		}
	}
	return m, nil
}

// runJob runs a command to its end and checks it completed with exit code 0.
func (s *server) runJob(ctx context.Context, args map[string]any) (map[string]any, error) {
	r, err := s.call(ctx, "run_command", args)
	if err != nil {
		return nil, err
	}
	if r["status"] != "completed" || r["exit_code"] != float64(0) {
		return r, fmt.Errorf("run_command %v: status %v, exit code %v, error %v", args["command"], r["status"], r["exit_code"], r["error"])
	}
	return r, nil
}

// rss is the server process's resident memory in bytes (VmRSS).
func (s *server) rss() (int64, error) { return s.status("VmRSS:") }

// status reads one size (kB) from the server process's /proc status.
func (s *server) status(key string) (int64, error) {
	if s.cmd == nil || s.cmd.Process == nil {
		return 0, errors.New("server pid unknown")
	}
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", s.cmd.Process.Pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), key); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("no %s in the server's status", key)
}

// waiting lists the instance's warm containers waiting for a job, leaving
// out those the bench saw claimed (their rename to the job's name is
// asynchronous, so List may still show them as waiting for a moment).
func (s *server) waiting(ctx context.Context, claimed map[string]bool) (map[string]bool, error) {
	cs, err := s.rt.List(ctx)
	if err != nil {
		return nil, err
	}
	w := map[string]bool{}
	for _, c := range cs {
		if c.Kind == sandbox.KindPool && c.JobID == "" && c.Running && !claimed[c.ID] {
			w[c.ID] = true
		}
	}
	return w, nil
}

// poolFull waits until want warm containers wait, one of them of image
// (a name of images.All; "" for any), and returns them. The pool keeps more
// than the policy's sizes of a shape whose jobs come fast, so a count alone
// can be met by bash sandboxes while python's is still starting.
func (s *server) poolFull(ctx context.Context, want int, image string, claimed map[string]bool) (map[string]bool, error) {
	deadline := time.Now().Add(60 * time.Second)
	for {
		w, err := s.waiting(ctx, claimed)
		if err != nil {
			return nil, err
		}
		if len(w) >= want {
			ok, err := s.anyOfImage(ctx, w, image)
			if err != nil {
				return nil, err
			}
			if ok {
				return w, nil
			}
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("the pool did not fill: %d of %d warm containers (one of image %q wanted) after 60 s", len(w), want, image)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// anyOfImage says whether one of the containers ids runs a sandbox image
// named image (always true for ""), of any tag: an older binary's images
// carry other tags (-only warm measures those too).
func (s *server) anyOfImage(ctx context.Context, ids map[string]bool, image string) (bool, error) {
	if image == "" {
		return true, nil
	}
	repo, _, _ := strings.Cut(images.Tag(image), ":")
	out, err := exec.CommandContext(ctx, "docker", "ps", "--no-trunc", "--format", "{{.ID}} {{.Image}}").Output()
	if err != nil {
		return false, fmt.Errorf("docker ps: %w", err)
	}
	for _, line := range strings.Split(string(out), "\n") {
		id, img, _ := strings.Cut(line, " ")
		if ids[id] && strings.HasPrefix(img, repo+":") {
			return true, nil
		}
	}
	return false, nil
}

// poolQuiet waits until the pool is done starting sandboxes: want of them
// wait (one of image), none of the instance's containers is still being
// created, and the waiting set stayed the same for settle. The pool keeps
// more than its sizes of a shape whose jobs come fast (pool.max_total), so
// want can be waiting while it still starts others; a call then shares the
// two CPUs with their starts, which the "while the pool refills" row
// measures on its own (docs/benchmark.md).
func (s *server) poolQuiet(ctx context.Context, want int, image string, claimed map[string]bool, settle time.Duration) (map[string]bool, error) {
	deadline := time.Now().Add(60 * time.Second)
	for {
		w, err := s.poolFull(ctx, want, image, claimed)
		if err != nil {
			return nil, err
		}
		time.Sleep(settle)
		again, err := s.waiting(ctx, claimed)
		if err != nil {
			return nil, err
		}
		out, err := exec.CommandContext(ctx, "docker", "ps", "-aq", "--filter", "label="+sandbox.LabelInstance+"="+s.instance, "--filter", "status=created").Output()
		if err != nil {
			return nil, fmt.Errorf("docker ps: %w", err)
		}
		if maps.Equal(w, again) && strings.TrimSpace(string(out)) == "" {
			return again, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("the pool did not settle in 60 s (%d waiting)", len(again))
		}
	}
}

// warmCase is a latency case measured with the pool full before every call.
type warmCase struct {
	lat        stats
	served     int // measured calls served by a container that was waiting
	phases     []phases
	containers map[string]bool
	jobs       []string // the measured calls' jobs (-trace reads their timelines)
}

// phases split a call by the job's own timestamps (same host clock).
type phases struct {
	toCreated, toStarted, running, toReturn time.Duration
	// For -trace's engine view (filled in from docker events afterwards).
	container        string
	started, ended   time.Time
	wall             time.Duration // usage.wall_ms: the job's own run time, measured inside the sandbox
	startedToDie     time.Duration // job started -> engine's die event of its container
	dieToEnded       time.Duration // die event -> job ended (stream closed, exit recorded)
	startedToRename  time.Duration // job started -> rename event (the claim's relabel)
	haveDie, haveRen bool
}

// measureWarm times args' run_command with the pool full before each call
// (quiet: also done starting the sandboxes it keeps past its sizes),
// a sandbox of image (a name of images.All) among those waiting.
func (s *server) measureWarm(ctx context.Context, o options, poolSize int, image string, quiet bool, claimed map[string]bool, args map[string]any) (*warmCase, error) {
	wc := &warmCase{}
	for i := -1; i < o.runs; i++ { // i == -1: warm-up
		wait := s.poolFull
		if quiet {
			wait = func(ctx context.Context, want int, image string, claimed map[string]bool) (map[string]bool, error) {
				return s.poolQuiet(ctx, want, image, claimed, o.settle)
			}
		}
		w, err := wait(ctx, poolSize, image, claimed)
		if err != nil {
			return nil, err
		}
		if !quiet {
			time.Sleep(o.settle)
		}
		sent := time.Now()
		r, err := s.runJob(ctx, args)
		if err != nil {
			return nil, err
		}
		d := time.Since(sent)
		got := time.Now()
		rec, err := s.call(ctx, "get_job", map[string]any{"job_id": r["job_id"]})
		if err != nil {
			return nil, err
		}
		cid, _ := rec["container_id"].(string)
		claimed[cid] = true
		if i < 0 {
			continue
		}
		wc.lat = append(wc.lat, d)
		if w[cid] {
			wc.served++
		}
		if o.trace {
			wc.phases = append(wc.phases, phasesOf(sent, got, rec))
			id, _ := r["job_id"].(string)
			wc.jobs = append(wc.jobs, id)
		}
	}
	return wc, nil
}

func phasesOf(sent, got time.Time, rec map[string]any) phases {
	t := func(k string) time.Time {
		v, _ := rec[k].(string)
		ts, _ := time.Parse(time.RFC3339Nano, v)
		return ts
	}
	created, started, ended := t("created_at"), t("started_at"), t("ended_at")
	p := phases{
		toCreated: created.Sub(sent), toStarted: started.Sub(created),
		running: ended.Sub(started), toReturn: got.Sub(ended),
		started: started, ended: ended,
	}
	p.container, _ = rec["container_id"].(string)
	if u, ok := rec["usage"].(map[string]any); ok {
		w, _ := u["wall_ms"].(float64)
		p.wall = time.Duration(w * float64(time.Millisecond))
	}
	return p
}

// eventLog follows the engine's container events of one instance while it
// runs (the engine keeps only its last few hundred events, so they are read
// as they happen rather than asked for afterwards).
type eventLog struct {
	cmd  *exec.Cmd
	done chan struct{}
	mu   sync.Mutex
	at   map[eventKey]time.Time
}

type eventKey struct{ id, action string }

func followEvents(s *server) (*eventLog, error) {
	cmd := exec.Command("docker", "events",
		"--filter", "type=container",
		"--filter", "label="+sandbox.LabelInstance+"="+(&config.Config{StateDir: s.stateDir}).Instance(),
		"--format", "{{.Actor.ID}} {{.Action}} {{.TimeNano}}")
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	e := &eventLog{cmd: cmd, done: make(chan struct{}), at: map[eventKey]time.Time{}}
	go func() {
		defer close(e.done)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			if len(f) != 3 {
				continue
			}
			ns, err := strconv.ParseInt(f[2], 10, 64)
			if err != nil {
				continue
			}
			e.mu.Lock()
			e.at[eventKey{f[0], f[1]}] = time.Unix(0, ns)
			e.mu.Unlock()
		}
	}()
	return e, nil
}

// stop ends the docker events process this bench started, and places each
// warm job's die and rename events on its timeline.
func (e *eventLog) stop(cases ...*warmCase) {
	time.Sleep(200 * time.Millisecond) // the last events in flight
	_ = e.cmd.Process.Kill()
	<-e.done
	_ = e.cmd.Wait()
	for _, c := range cases {
		for i := range c.phases {
			p := &c.phases[i]
			if t, ok := e.at[eventKey{p.container, "die"}]; ok {
				p.startedToDie, p.dieToEnded, p.haveDie = t.Sub(p.started), p.ended.Sub(t), true
			}
			if t, ok := e.at[eventKey{p.container, "rename"}]; ok {
				p.startedToRename, p.haveRen = t.Sub(p.started), true
			}
		}
	}
}

// throughput runs n trivial jobs from callers goroutines sharing the one
// client (mcp-go's stdio client matches answers to requests by id, so calls
// may overlap) and returns jobs per second.
func (s *server) throughput(ctx context.Context, n, callers int) (float64, error) {
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, callers)
	start := time.Now()
	for c := 0; c < callers; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(n) {
				if _, err := s.runJob(ctx, map[string]any{"command": "true"}); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	el := time.Since(start)
	close(errs)
	if err := <-errs; err != nil {
		return 0, err
	}
	return float64(n) / el.Seconds(), nil
}

type report struct {
	// timelines are the warm calls' server-side timelines by job (-trace).
	timelines                            map[string]map[string]float64
	host, dockerRun, dockerExec          stats
	dockerRunJPS                         float64
	warmTrue, warmEcho, warmPy           *warmCase
	warmTrueRefilling                    *warmCase // as warmTrue, but the call comes while the pool still starts sandboxes
	coldTrue, coldEcho, dockerRunOff     stats
	seqOn, concOn, seqOff, concOff       float64
	rssIdle, rssIdleAnon, rssBusy        int64
	getJobIdle, getJobFlood              stats
	poolSize, runs, seqN, concN, callers int
	seqOffN, concOffN                    int
}

func run(ctx context.Context, o options) error {
	began := time.Now()
	switch o.only {
	case "gosuites":
		return goSuites(ctx, o)
	case "project":
		return project(ctx, o)
	case "http":
		return httpVsStdio(ctx, o)
	case "engines":
		return engines(ctx, o)
	case "workspace":
		return workspaceOnly(ctx, o)
	case "kubernetes":
		return kubernetesRuntimes(ctx, o)
	case "features":
		return features(ctx, o, &report{runs: o.runs})
	case "secrets":
		return secretsLatency(ctx, o)
	case "load":
		return loadBench(ctx, o)
	case "templates":
		return templatesBench(ctx, o)
	case "pause":
		return pauseBench(ctx, o)
	case "traces":
		return tracesBench(ctx, o)
	case "listen":
		return listenBench(ctx, o)
	case "e2b":
		return e2bBench(ctx, o)
	case "hibernate":
		return hibernateBench(ctx, o)
	case "warm":
		return warmOnly(ctx, o)
	}
	image := images.Tag("base")
	r := &report{runs: o.runs, seqN: o.seq, concN: o.conc, callers: o.callers, seqOffN: o.seqOff, concOffN: o.concOff}
	var err error

	progress("baseline: host /bin/true x%d", o.runs)
	if r.host, err = sample(o.runs, true, func() error { return exec.Command("/bin/true").Run() }); err != nil {
		return err
	}
	progress("baseline: docker run --rm x%d", o.dockerRuns)
	var dockerTotal time.Duration
	if r.dockerRun, err = sample(o.dockerRuns, true, func() error {
		return exec.CommandContext(ctx, "docker", "run", "--rm", "--network", "none", image, "true").Run()
	}); err != nil {
		return fmt.Errorf("docker run: %w", err)
	}
	for _, d := range r.dockerRun {
		dockerTotal += d
	}
	r.dockerRunJPS = float64(len(r.dockerRun)) / dockerTotal.Seconds()
	progress("baseline: docker exec x%d", o.runs)
	if r.dockerExec, err = dockerExec(ctx, o.runs, image); err != nil {
		return fmt.Errorf("docker exec: %w", err)
	}

	if err := poolOn(ctx, o, r); err != nil {
		return err
	}
	if err := poolOff(ctx, o, r); err != nil {
		return err
	}
	printReport(o, r)
	// The guard on the warm path: loud here, and the bench's exit status.
	// Under -trace the server logs at debug level: not the same figure.
	var regression error
	if o.trace {
		fmt.Printf("  warm true vs recorded best: not compared under -trace (the server logs at debug level)\n")
	} else {
		regression = checkBest(r.warmTrue.lat.p50())
	}
	if o.only == "core" {
		return regression
	}
	// Scripts, sessions and workspaces: a failure here is reported, not fatal.
	if err := features(ctx, o, r); err != nil {
		fmt.Printf("\nfeatures: %v\n", err)
	}
	if err := goSuites(ctx, o); err != nil {
		fmt.Printf("\ngo suites: %v\n", err)
	}
	if err := project(ctx, o); err != nil {
		fmt.Printf("\nproject: %v\n", err)
	}
	if err := httpVsStdio(ctx, o); err != nil {
		fmt.Printf("\nhttp: %v\n", err)
	}
	if err := engines(ctx, o); err != nil {
		fmt.Printf("\nengines: %v\n", err)
	}
	if err := secretsLatency(ctx, o); err != nil {
		fmt.Printf("\nsecrets: %v\n", err)
	}
	progress("done in %s", time.Since(began).Round(time.Second))
	return regression
}

// dockerExec times `docker exec <c> true` into one running container of image.
func dockerExec(ctx context.Context, n int, image string) (stats, error) {
	out, err := exec.CommandContext(ctx, "docker", "run", "-d", "--rm", "--network", "none",
		"--label", "dev.sandboxer.bench=true", image, "sleep", "infinity").Output()
	if err != nil {
		return nil, fmt.Errorf("start a container: %w", err)
	}
	id := strings.TrimSpace(string(out))
	defer func() {
		_ = exec.Command("docker", "rm", "-f", id).Run()
	}()
	return sample(n, true, func() error {
		return exec.CommandContext(ctx, "docker", "exec", id, "true").Run()
	})
}

func poolOn(ctx context.Context, o options, r *report) error {
	progress("starting the server, pool on")
	s, err := startServer(ctx, o, "on", "")
	if err != nil {
		return err
	}
	defer s.close()
	r.poolSize = 3 // policies/default.yaml: bash 2, python 1
	claimed := map[string]bool{}
	if _, err := s.poolFull(ctx, r.poolSize, "", claimed); err != nil {
		return err
	}
	var events *eventLog
	if o.trace {
		if events, err = followEvents(s); err != nil {
			return fmt.Errorf("docker events: %w", err)
		}
		defer func() {
			if events.cmd.ProcessState == nil {
				events.stop()
			}
		}()
	}
	progress("warm: run_command true x%d (the pool full and quiet before each)", o.runs)
	if r.warmTrue, err = s.measureWarm(ctx, o, r.poolSize, "base", true, claimed, map[string]any{"command": "true"}); err != nil {
		return err
	}
	progress("warm: run_command echo hi x%d", o.runs)
	if r.warmEcho, err = s.measureWarm(ctx, o, r.poolSize, "base", true, claimed, map[string]any{"command": "echo hi"}); err != nil {
		return err
	}
	progress("warm: run_command true x%d while the pool refills", o.runs)
	if r.warmTrueRefilling, err = s.measureWarm(ctx, o, r.poolSize, "base", false, claimed, map[string]any{"command": "true"}); err != nil {
		return err
	}
	progress("warm: python3 -c 'print(1)' x%d", o.runs)
	if r.warmPy, err = s.measureWarm(ctx, o, r.poolSize, "python", true, claimed, map[string]any{"command": "python3 -c 'print(1)'", "language": "python"}); err != nil {
		return err
	}

	if events != nil {
		events.stop(r.warmTrue, r.warmEcho, r.warmPy)
	}
	if o.trace {
		var err error
		if r.timelines, err = callTimelines(s.logPath); err != nil {
			return fmt.Errorf("call timelines: %w", err)
		}
	}

	progress("memory: idle with a full pool")
	if _, err := s.poolFull(ctx, r.poolSize, "", claimed); err != nil {
		return err
	}
	// Idle: no call for longer than the server waits before it trims its
	// memory (cmd/sandboxer idleTrimAfter, 5 s).
	time.Sleep(6 * time.Second)
	if r.rssIdle, err = s.rss(); err != nil {
		return err
	}
	if r.rssIdleAnon, err = s.status("RssAnon:"); err != nil {
		return err
	}

	progress("get_job: idle, then under 4 output floods")
	probe, err := s.runJob(ctx, map[string]any{"command": "true"})
	if err != nil {
		return err
	}
	getJob := func() error {
		_, err := s.call(ctx, "get_job", map[string]any{"job_id": probe["job_id"]})
		return err
	}
	if r.getJobIdle, err = sample(o.runs, true, getJob); err != nil {
		return err
	}
	var floods []any
	for i := 0; i < 4; i++ {
		f, err := s.call(ctx, "run_command", map[string]any{"command": "yes", "background": true, "timeout_s": 60})
		if err != nil {
			return err
		}
		floods = append(floods, f["job_id"])
	}
	time.Sleep(time.Second)
	r.getJobFlood, err = sample(o.runs, true, getJob)
	for _, id := range floods {
		_, _ = s.call(ctx, "kill_job", map[string]any{"job_id": id, "signal": "KILL"})
	}
	if err != nil {
		return err
	}

	progress("memory: 8 jobs running (sleep 60, killed once measured)")
	var sleepers []any
	for i := 0; i < 8; i++ {
		j, err := s.call(ctx, "run_command", map[string]any{"command": "sleep 60", "background": true})
		if err != nil {
			return err
		}
		sleepers = append(sleepers, j["job_id"])
	}
	running := func() (int, error) {
		n := 0
		for _, id := range sleepers {
			j, err := s.call(ctx, "get_job", map[string]any{"job_id": id})
			if err != nil {
				return 0, err
			}
			if j["status"] == "running" && j["started_at"] != nil && j["started_at"] != "" {
				n++
			}
		}
		return n, nil
	}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		n, err := running()
		if err != nil {
			return err
		}
		if n == len(sleepers) {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("only %d of %d sleep jobs running after 20 s", n, len(sleepers))
		}
	}
	if r.rssBusy, err = s.rss(); err != nil {
		return err
	}
	for _, id := range sleepers {
		_, _ = s.call(ctx, "kill_job", map[string]any{"job_id": id, "signal": "KILL"})
	}

	progress("throughput, pool on: %d sequential jobs", o.seq)
	if _, err := s.poolFull(ctx, r.poolSize, "", claimed); err != nil {
		return err
	}
	if r.seqOn, err = s.throughput(ctx, o.seq, 1); err != nil {
		return err
	}
	progress("throughput, pool on: %d jobs from %d callers", o.conc, o.callers)
	if _, err := s.poolFull(ctx, r.poolSize, "", claimed); err != nil {
		return err
	}
	if r.concOn, err = s.throughput(ctx, o.conc, o.callers); err != nil {
		return err
	}
	return nil
}

func poolOff(ctx context.Context, o options, r *report) error {
	progress("starting the server, pool off")
	s, err := startServer(ctx, o, "off", "pool:\n  enabled: false\n")
	if err != nil {
		return err
	}
	defer s.close()
	// Interleaved with docker run --rm of the same command, so the ratio holds
	// even when the machine's load changes during the bench.
	progress("cold: run_command true and echo hi x%d, interleaved with docker run --rm", o.runs)
	cold := func(cmd string) error {
		_, err := s.runJob(ctx, map[string]any{"command": cmd})
		return err
	}
	dockerRun := func() error {
		return exec.CommandContext(ctx, "docker", "run", "--rm", "--network", "none", images.Tag("base"), "true").Run()
	}
	if err := cold("true"); err != nil { // warm-up
		return err
	}
	for i := 0; i < o.runs; i++ {
		for _, c := range []struct {
			f   func() error
			out *stats
		}{{dockerRun, &r.dockerRunOff}, {func() error { return cold("true") }, &r.coldTrue}, {func() error { return cold("echo hi") }, &r.coldEcho}} {
			start := time.Now()
			if err := c.f(); err != nil {
				return err
			}
			*c.out = append(*c.out, time.Since(start))
		}
	}
	if o.seqOff > 0 {
		progress("throughput, pool off: %d sequential jobs", o.seqOff)
		if r.seqOff, err = s.throughput(ctx, o.seqOff, 1); err != nil {
			return err
		}
	}
	if o.concOff > 0 {
		progress("throughput, pool off: %d jobs from %d callers", o.concOff, o.callers)
		if r.concOff, err = s.throughput(ctx, o.concOff, o.callers); err != nil {
			return err
		}
	}
	return nil
}

func printReport(o options, r *report) {
	host, _ := os.Hostname()
	fmt.Printf("sandboxer bench, %s, %s, %d CPUs; %d runs per latency case, SANDBOXER_MAX_JOBS=%d\n\n",
		time.Now().Format("2006-01-02"), host, runtime.NumCPU(), r.runs, o.maxJobs)
	fmt.Printf("%-46s %9s %9s  %s\n", "latency (one call, end to end)", "p50 ms", "p95 ms", "goal")
	line := func(name string, s stats, goal string) {
		fmt.Printf("%-46s %9.2f %9.2f  %s\n", name, ms(s.p50()), ms(s.p95()), goal)
	}
	line("host /bin/true", r.host, "")
	line("docker run --rm --network none base true", r.dockerRun, "")
	line("docker exec true (running container)", r.dockerExec, "")
	line("run_command true, warm pool", r.warmTrue.lat, "p50 <= 15, p95 <= 40")
	line("run_command echo hi, warm pool", r.warmEcho.lat, "p50 <= 15, p95 <= 40")
	line("run_command true, warm, the pool refilling", r.warmTrueRefilling.lat, "")
	line("run_command python3 -c print(1), warm pool", r.warmPy.lat, "")
	line("docker run --rm, interleaved with pool-off calls", r.dockerRunOff, "")
	line("run_command true, pool off", r.coldTrue, "<= 1.1x docker run")
	line("run_command echo hi, pool off", r.coldEcho, "<= 1.1x docker run")
	line("get_job, idle", r.getJobIdle, "")
	line("get_job, 4 jobs flooding output", r.getJobFlood, "")
	fmt.Printf("\nwarm calls served by a container waiting in the pool before the call: true %d/%d, echo %d/%d, python %d/%d\n",
		r.warmTrue.served, len(r.warmTrue.lat), r.warmEcho.served, len(r.warmEcho.lat), r.warmPy.served, len(r.warmPy.lat))

	fmt.Printf("\n%-46s %9s  %s\n", "throughput (trivial jobs: true)", "jobs/s", "goal")
	tp := func(name string, v float64, goal string) {
		if v == 0 {
			fmt.Printf("%-46s %9s\n", name, "skipped")
			return
		}
		fmt.Printf("%-46s %9.2f  %s\n", name, v, goal)
	}
	tp(fmt.Sprintf("docker run --rm, serial (%d runs)", len(r.dockerRun)), r.dockerRunJPS, "")
	tp(fmt.Sprintf("pool on, %d sequential", r.seqN), r.seqOn, ">= 1.5x docker run")
	tp(fmt.Sprintf("pool on, %d from %d callers", r.concN, r.callers), r.concOn, ">= 1.5x docker run")
	tp(fmt.Sprintf("pool off, %d sequential", r.seqOffN), r.seqOff, "")
	tp(fmt.Sprintf("pool off, %d from %d callers", r.concOffN, r.callers), r.concOff, "")

	fmt.Printf("\n%-46s %9s  %s\n", "server memory (VmRSS)", "MiB", "goal")
	fmt.Printf("%-46s %9.1f  %s\n", "idle (6 s without calls), pool full", float64(r.rssIdle)/(1<<20), "<= 30 MiB")
	fmt.Printf("%-46s %9.1f\n", "  of which anonymous (heap, stacks)", float64(r.rssIdleAnon)/(1<<20))
	fmt.Printf("%-46s %9.1f\n", "8 jobs running (sleep)", float64(r.rssBusy)/(1<<20))

	dr := float64(r.dockerRun.p50())
	fmt.Printf("\nratios\n")
	ratio := func(name string, v float64, goal string, ok bool) {
		mark := "missed"
		if ok {
			mark = "met"
		}
		fmt.Printf("  %-60s %8.3f  goal %s: %s\n", name, v, goal, mark)
	}
	w := float64(r.warmTrue.lat.p50())
	ratio("warm p50 / docker run p50 (true)", w/dr, "<= 0.05 (20x faster)", w/dr <= 0.05)
	fmt.Printf("  %-60s %8.1fx\n", "  i.e. warm is this many times faster than docker run", dr/w)
	di := float64(r.dockerRunOff.p50())
	ratio("pool off p50 / interleaved docker run p50 (true)", float64(r.coldTrue.p50())/di, "<= 1.1", float64(r.coldTrue.p50())/di <= 1.1)
	ratio("pool off p50 / interleaved docker run p50 (echo hi)", float64(r.coldEcho.p50())/di, "<= 1.1", float64(r.coldEcho.p50())/di <= 1.1)
	info := func(name string, v float64) { fmt.Printf("  %-60s %8.3f\n", name, v) }
	info("warm p50 / docker exec p50 (true)", w/float64(r.dockerExec.p50()))
	ratio("sequential jobs/s, pool on / serial docker run", r.seqOn/r.dockerRunJPS, ">= 1.5", r.seqOn/r.dockerRunJPS >= 1.5)
	ratio(fmt.Sprintf("%d-caller jobs/s, pool on / serial docker run", r.callers), r.concOn/r.dockerRunJPS, ">= 1.5", r.concOn/r.dockerRunJPS >= 1.5)
	if r.seqOff > 0 {
		info("sequential jobs/s, pool off / serial docker run", r.seqOff/r.dockerRunJPS)
	}
	if r.concOff > 0 {
		info(fmt.Sprintf("%d-caller jobs/s, pool off / serial docker run", r.callers), r.concOff/r.dockerRunJPS)
	}
	info("get_job flooded / idle (p50)", float64(r.getJobFlood.p50())/float64(r.getJobIdle.p50()))
	fmt.Printf("  goals (not asserted): warm p50 <= 15 ms: %v; p95 <= 40 ms: %v; idle RSS <= 30 MiB: %v\n",
		yes(ms(r.warmTrue.lat.p50()) <= 15), yes(ms(r.warmTrue.lat.p95()) <= 40), yes(r.rssIdle <= 30<<20))

	if o.trace {
		fmt.Printf("\nwhere a warm call's time goes (p50 of each phase, ms)\n")
		fmt.Printf("  from the client's clock and the job's created/started/ended stamps:\n")
		fmt.Printf("  %-10s %10s %10s %10s %10s %12s\n", "case", "to created", "to started", "running", "to answer", "(in sandbox)")
		cols := []warmCol{{"true", r.warmTrue}, {"echo hi", r.warmEcho}, {"python3", r.warmPy}}
		for _, c := range cols {
			var a, b, cc, d, w stats
			for _, p := range c.wc.phases {
				a, b, cc, d, w = append(a, p.toCreated), append(b, p.toStarted), append(cc, p.running), append(d, p.toReturn), append(w, p.wall)
			}
			fmt.Printf("  %-10s %10.2f %10.2f %10.2f %10.2f %12.2f\n", c.name, ms(a.p50()), ms(b.p50()), ms(cc.p50()), ms(d.p50()), ms(w.p50()))
		}
		fmt.Printf("  \"running\" split by the engine's events of the container (docker events):\n")
		fmt.Printf("  %-10s %16s %16s %18s\n", "case", "started->die", "die->ended", "started->rename")
		for _, c := range cols {
			var a, b, rn stats
			for _, p := range c.wc.phases {
				if p.haveDie {
					a, b = append(a, p.startedToDie), append(b, p.dieToEnded)
				}
				if p.haveRen {
					rn = append(rn, p.startedToRename)
				}
			}
			fmt.Printf("  %-10s %16.2f %16.2f %18.2f\n", c.name, ms(a.p50()), ms(b.p50()), ms(rn.p50()))
		}
		printTimelines(r.timelines, cols)
	}
}

func yes(b bool) string {
	if b {
		return "met"
	}
	return "missed"
}
