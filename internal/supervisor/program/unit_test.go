package program

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"

	"github.com/sandboxer/sandboxer/internal/supervisor/proto"
)

const syscallSIGTERM = syscall.SIGTERM

func TestParseStat(t *testing.T) {
	for in, want := range map[string][2]int{
		"42 (sh) S 7 42 42 0 -1":             {7, 'S'},
		"43 (a) b) (c) Z 1 43 43 0":          {1, 'Z'},
		"44 (with space ) ) R 12 1 1":        {12, 'R'},
		"45 (x)":                             {-1, 0},
		"garbage":                            {-1, 0},
		"46 (x) S notanumber 1":              {-1, 0},
		"47 (x) SS 1 2":                      {-1, 0},
		"48 (\n\x00) T 3 48 48 0 -1 4194560": {3, 'T'},
	} {
		ppid, st, ok := parseStat([]byte(in))
		if !ok {
			ppid, st = -1, 0
		}
		if ppid != want[0] || int(st) != want[1] {
			t.Errorf("%q: ppid %d state %q ok %v, want %v", in, ppid, st, ok, want)
		}
	}
}

func TestDescendants(t *testing.T) {
	procs := []procInfo{{pid: 1, ppid: 0}, {pid: 10, ppid: 1}, {pid: 11, ppid: 10}, {pid: 12, ppid: 11},
		{pid: 13, ppid: 11, zombie: true}, {pid: 14, ppid: 13}, {pid: 20, ppid: 1}}
	if got := descendants(10, procs); !reflect.DeepEqual(got, []int{11, 12, 14}) {
		t.Fatalf("got %v", got)
	}
}

func TestContainerModeRefusedOnHost(t *testing.T) {
	if os.Getpid() == 1 {
		t.Skip("running as pid 1")
	}
	if why := containerModeRefusal(); why == "" {
		t.Fatal("container kill mode allowed in a test process")
	}
}

func writeFiles(t *testing.T, root string, files map[string]string) {
	for name, content := range files {
		p := filepath.Join(root, name)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func TestReadCgroup(t *testing.T) {
	v1 := t.TempDir()
	writeFiles(t, v1, map[string]string{
		"cpuacct/cpuacct.usage":            "2500000000\n",
		"memory/memory.max_usage_in_bytes": "123456789\n",
		"memory/memory.oom_control":        "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n",
	})
	if got := readCgroup(v1); got != (cgroupSnap{cpuNS: 2500000000, peak: 123456789, oomKills: 2, hasCPU: true, hasPeak: true, hasOOM: true}) {
		t.Errorf("v1: %+v", got)
	}
	v2 := t.TempDir()
	writeFiles(t, v2, map[string]string{
		"cgroup.controllers": "cpu memory pids\n",
		"cpu.stat":           "usage_usec 1500\nuser_usec 1000\nsystem_usec 500\n",
		"memory.peak":        "999\n",
		"memory.events":      "low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\n",
	})
	if got := readCgroup(v2); got != (cgroupSnap{cpuNS: 1500000, peak: 999, oomKills: 1, hasCPU: true, hasPeak: true, hasOOM: true}) {
		t.Errorf("v2: %+v", got)
	}
	if got := readCgroup(t.TempDir()); got.hasCPU || got.hasPeak || got.hasOOM {
		t.Errorf("empty: %+v", got)
	}
}

func TestUsageFromCgroup(t *testing.T) {
	root := t.TempDir()
	old := cgroupRoot
	cgroupRoot = root
	defer func() { cgroupRoot = old }()
	files := map[string]string{
		"cpuacct/cpuacct.usage":            "1000000000\n",
		"memory/memory.max_usage_in_bytes": "5000\n",
		"memory/memory.oom_control":        "oom_kill 0\n",
	}
	writeFiles(t, root, files)
	s := &super{spec: proto.Spec{KillMode: proto.KillContainer}}
	s.cgroupBase = readCgroup(root)
	s.useCgroup = true
	files["cpuacct/cpuacct.usage"] = "1750000000\n"
	files["memory/memory.max_usage_in_bytes"] = "300000000\n"
	files["memory/memory.oom_control"] = "oom_kill 1\n"
	writeFiles(t, root, files)
	u, oom := s.usage(1234 * 1e6)
	if u.CPUMS != 750 || u.PeakMemoryBytes != 300000000 || u.WallMS != 1234 || u.Source != "cgroup" || !oom {
		t.Fatalf("%+v oom %v", u, oom)
	}
}

func TestLookPath(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "tool"), []byte("#!/bin/sh\n"), 0o755)
	os.WriteFile(filepath.Join(dir, "data"), []byte("x"), 0o644)
	os.Mkdir(filepath.Join(dir, "sub"), 0o755)
	env := []string{"PATH=/nonexistent", "PATH=" + dir}
	if p, _, err := lookPath("tool", env, ""); err != nil || p != filepath.Join(dir, "tool") {
		t.Errorf("tool: %q %v", p, err)
	}
	if _, code, err := lookPath("data", env, ""); err == nil || code != codeCannotExec {
		t.Errorf("data: %d %v", code, err)
	}
	if _, code, err := lookPath("sub", env, ""); err == nil || code != codeCannotExec {
		t.Errorf("dir: %d %v", code, err)
	}
	if _, code, err := lookPath("missing", env, ""); err == nil || code != codeNotFound {
		t.Errorf("missing: %d %v", code, err)
	}
	if p, _, err := lookPath("./tool", nil, dir); err != nil || p != "./tool" {
		t.Errorf("relative: %q %v", p, err)
	}
	if p, _, err := lookPath("tool", []string{"PATH=."}, dir); err != nil || p != filepath.Join(dir, "tool") {
		t.Errorf("dot in PATH: %q %v", p, err)
	}
	if p, _, err := lookPath("sh", nil, ""); err != nil || !filepath.IsAbs(p) {
		t.Errorf("default PATH: %q %v", p, err)
	}
}

func TestOverlayEnv(t *testing.T) {
	got := overlayEnv([]string{"PATH=/bin", "HOME=/h", "LANG=C"}, []string{"HOME=/x", "A=1"})
	want := []string{"PATH=/bin", "HOME=/x", "LANG=C", "A=1"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("overlayEnv = %q, want %q", got, want)
	}
}

func TestWithUnpackedApt(t *testing.T) {
	dir := t.TempDir()
	env := []string{"PATH=/usr/bin:/bin", aptDirEnv + "=" + dir, "HOME=/h"}
	if got := withUnpackedApt(env); strings.Join(got, " ") != strings.Join(env, " ") {
		t.Fatalf("before anything was unpacked: %q", got)
	}
	if err := os.Mkdir(filepath.Join(dir, "root"), 0o755); err != nil {
		t.Fatal(err)
	}
	got := withUnpackedApt(env)
	r := dir + "/root"
	want := []string{
		"PATH=/usr/bin:/bin:" + r + "/usr/local/bin:" + r + "/usr/bin:" + r + "/bin:" + r + "/usr/sbin:" + r + "/sbin",
		aptDirEnv + "=" + dir, "HOME=/h",
		"LD_LIBRARY_PATH=" + r + "/usr/lib/" + multiarch + ":" + r + "/lib/" + multiarch + ":" + r + "/usr/lib:" + r + "/lib",
		"PYTHONPATH=" + r + "/usr/lib/python3/dist-packages",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("withUnpackedApt =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if got := withUnpackedApt([]string{"PATH=/bin"}); len(got) != 1 {
		t.Fatalf("without %s: %q", aptDirEnv, got)
	}
}
