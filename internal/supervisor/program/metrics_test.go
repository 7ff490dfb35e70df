package program

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestSampleMetrics: a v2 and a v1 cgroup tree are read as they are; CPU
// is the time used over the sample; a missing figure is -1.
func TestSampleMetrics(t *testing.T) {
	write := func(path, content string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	v2 := t.TempDir()
	write(filepath.Join(v2, "cgroup.controllers"), "cpu memory\n")
	write(filepath.Join(v2, "cpu.stat"), "usage_usec 1000\nuser_usec 800\n")
	write(filepath.Join(v2, "memory.current"), "5242880\n")
	write(filepath.Join(v2, "memory.stat"), "anon 1024\nfile 4096\n")
	write(filepath.Join(v2, "memory.max"), "max\n")
	m := sampleMetrics(v2, 10*time.Millisecond)
	if m.CPUUsedCores != 0 || m.MemUsed != 5<<20 || m.MemCache != 4096 || m.MemLimit != -1 {
		t.Errorf("v2: %+v", m)
	}

	v1 := t.TempDir()
	write(filepath.Join(v1, "cpuacct", "cpuacct.usage"), "1000000\n")
	write(filepath.Join(v1, "memory", "memory.usage_in_bytes"), "1048576\n")
	write(filepath.Join(v1, "memory", "memory.stat"), "cache 8192\nrss 4096\n")
	write(filepath.Join(v1, "memory", "memory.limit_in_bytes"), "536870912\n")
	m = sampleMetrics(v1, 10*time.Millisecond)
	if m.CPUUsedCores != 0 || m.MemUsed != 1<<20 || m.MemCache != 8192 || m.MemLimit != 512<<20 {
		t.Errorf("v1: %+v", m)
	}
	write(filepath.Join(v1, "memory", "memory.limit_in_bytes"), "9223372036854771712\n")
	if m = sampleMetrics(v1, time.Millisecond); m.MemLimit != -1 {
		t.Errorf("v1 without a limit: %+v", m)
	}
	if m = sampleMetrics(t.TempDir(), time.Millisecond); m.CPUUsedCores != -1 || m.MemUsed != -1 || m.MemCache != -1 || m.MemLimit != -1 {
		t.Errorf("no cgroup: %+v", m)
	}
}
