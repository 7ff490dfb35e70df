package program

import (
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/sandboxer/sandboxer/internal/supervisor/proto"
)

// metricsMain samples the container's cgroup (proto.MetricsCommand).
func metricsMain(stdout io.Writer) int {
	m := sampleMetrics(cgroupRoot, proto.MetricsSampleMS*time.Millisecond)
	if err := json.NewEncoder(stdout).Encode(m); err != nil {
		return 1
	}
	return 0
}

// sampleMetrics reads the cgroup at root, its CPU time twice over span.
func sampleMetrics(root string, span time.Duration) proto.Metrics {
	m := proto.Metrics{CPUUsedCores: -1, MemUsed: -1, MemCache: -1, MemLimit: -1}
	before, t0 := readCgroup(root), time.Now()
	time.Sleep(span)
	after, t1 := readCgroup(root), time.Now()
	if before.hasCPU && after.hasCPU && after.cpuNS >= before.cpuNS {
		m.CPUUsedCores = float64(after.cpuNS-before.cpuNS) / float64(t1.Sub(t0).Nanoseconds())
	}
	if _, err := os.Stat(filepath.Join(root, "cgroup.controllers")); err == nil { // v2
		if v, ok := intFile(filepath.Join(root, "memory.current")); ok {
			m.MemUsed = v
		}
		if v, ok := keyedValue(filepath.Join(root, "memory.stat"), "file"); ok {
			m.MemCache = v
		}
		if v, ok := intFile(filepath.Join(root, "memory.max")); ok {
			m.MemLimit = v
		}
		return m
	}
	mem := filepath.Join(root, "memory")
	if v, ok := intFile(filepath.Join(mem, "memory.usage_in_bytes")); ok {
		m.MemUsed = v
	}
	if v, ok := keyedValue(filepath.Join(mem, "memory.stat"), "cache"); ok {
		m.MemCache = v
	}
	// v1 says "no limit" as a huge number near the largest page-aligned int64.
	if v, ok := intFile(filepath.Join(mem, "memory.limit_in_bytes")); ok && v < 1<<62 {
		m.MemLimit = v
	}
	return m
}
