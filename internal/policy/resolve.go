package policy

import (
	"fmt"
	"math"
	"strconv"
	"time"
)

// Per-request floors.
const (
	minTimeoutS = 0.1  // seconds
	minCPUs     = 0.01 // also the floor of limits.cpus.* in Validate
)

// Request is what an agent asked for; a nil field was not given and gets the
// policy default.
type Request struct {
	TimeoutS *float64 // seconds, may be fractional (>= 0.1)
	MemoryMB *int64   // MiB (>= 16)
	CPUs     *float64 // CPUs (>= 0.01)
	Pids     *int64   // (>= 16)
}

// Resolved are the concrete limits of one job. The fixed limits (open files,
// file size, tmpfs sizes) come from the policy unchanged.
type Resolved struct {
	Timeout       time.Duration
	MemoryBytes   int64
	NanoCPUs      int64 // 1e9 = one CPU
	Pids          int64
	OpenFiles     int64
	FileSizeBytes int64
	TmpBytes      int64
	WorkdirBytes  int64
}

// LimitError is a request the policy refuses. Field is the request field
// ("timeout_s", "memory_mb", "cpus", "pids", "wait_s"); Message is a complete
// sentence naming the field (and the ceiling and its policy key when one was
// exceeded), fit to show the agent as is.
type LimitError struct {
	Field   string
	Message string
}

func (e *LimitError) Error() string { return e.Message }

func limitErr(field, format string, args ...any) *LimitError {
	return &LimitError{Field: field, Message: fmt.Sprintf(format, args...)}
}

func fmtFloat(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }

// checkFloat validates a fractional request value against [lo, hi].
func checkFloat(field string, v, lo, hi float64, hiKey string) *LimitError {
	switch {
	case math.IsNaN(v) || math.IsInf(v, 0):
		return limitErr(field, "%s must be a finite number, got %s", field, fmtFloat(v))
	case v <= 0:
		return limitErr(field, "%s must be > 0, got %s", field, fmtFloat(v))
	case v < lo:
		return limitErr(field, "%s must be at least %s, got %s", field, fmtFloat(lo), fmtFloat(v))
	case v > hi:
		return limitErr(field, "%s %s is over the policy ceiling of %s (%s)", field, fmtFloat(v), fmtFloat(hi), hiKey)
	}
	return nil
}

// checkInt validates an integer request value against [lo, hi].
func checkInt(field string, v, lo, hi int64, hiKey string) *LimitError {
	switch {
	case v <= 0:
		return limitErr(field, "%s must be > 0, got %d", field, v)
	case v < lo:
		return limitErr(field, "%s must be at least %d, got %d", field, lo, v)
	case v > hi:
		return limitErr(field, "%s %d is over the policy ceiling of %d (%s)", field, v, hi, hiKey)
	}
	return nil
}

// Resolve turns a request into concrete limits: an omitted field gets the
// policy default; a given one must be within [floor, ceiling]. The first
// offending field (in the order timeout_s, memory_mb, cpus, pids) is returned
// as a *LimitError, e.g.
//
//	memory_mb 99999999 is over the policy ceiling of 4096 (limits.memory_mb.max)
//	timeout_s must be > 0, got -1
//
// The policy is assumed valid (Validate returned nil).
func (p *Policy) Resolve(r Request) (Resolved, error) {
	l := p.Limits
	out := Resolved{
		Timeout:       seconds(l.TimeoutS.Default),
		MemoryBytes:   l.MemoryMB.Default << 20,
		NanoCPUs:      nanoCPUs(l.CPUs.Default),
		Pids:          l.Pids.Default,
		OpenFiles:     l.OpenFiles,
		FileSizeBytes: l.FileSizeMB << 20,
		TmpBytes:      l.TmpMB << 20,
		WorkdirBytes:  l.WorkdirMB << 20,
	}
	if r.TimeoutS != nil {
		v := *r.TimeoutS
		if err := checkFloat("timeout_s", v, minTimeoutS, float64(l.TimeoutS.Max), "limits.timeout_s.max"); err != nil {
			return Resolved{}, err
		}
		out.Timeout = time.Duration(math.Round(v*1000)) * time.Millisecond
	}
	if r.MemoryMB != nil {
		if err := checkInt("memory_mb", *r.MemoryMB, minMemoryMB, l.MemoryMB.Max, "limits.memory_mb.max"); err != nil {
			return Resolved{}, err
		}
		out.MemoryBytes = *r.MemoryMB << 20
	}
	if r.CPUs != nil {
		if err := checkFloat("cpus", *r.CPUs, minCPUs, l.CPUs.Max, "limits.cpus.max"); err != nil {
			return Resolved{}, err
		}
		out.NanoCPUs = nanoCPUs(*r.CPUs)
	}
	if r.Pids != nil {
		// Any runsc the policy names (its own, a template's, snapshots'):
		// the request's language is not known here.
		if min := p.minPidsRunsc(); p.namesRuntime(RuntimeRunsc) && *r.Pids > 0 && *r.Pids < min {
			return Resolved{}, limitErr("pids", "pids must be at least %d under runtime runsc (gVisor's own threads count against the pids limit), got %d", min, *r.Pids)
		}
		if err := checkInt("pids", *r.Pids, minPids, l.Pids.Max, "limits.pids.max"); err != nil {
			return Resolved{}, err
		}
		out.Pids = *r.Pids
	}
	return out, nil
}

func nanoCPUs(c float64) int64 { return int64(math.Round(c * 1e9)) }

// ResolveWait resolves how long a call should wait for a job before returning
// a running handle: nil → jobs.default_wait_s; otherwise 0 (return at once)
// up to jobs.max_wait_s seconds, fractional allowed. Errors are *LimitError
// with Field "wait_s".
func (p *Policy) ResolveWait(waitS *float64) (time.Duration, error) {
	if waitS == nil {
		return p.Jobs.DefaultWait(), nil
	}
	v := *waitS
	if v == 0 {
		return 0, nil
	}
	if v < 0 && !math.IsInf(v, 0) {
		return 0, limitErr("wait_s", "wait_s must be >= 0, got %s", fmtFloat(v))
	}
	if err := checkFloat("wait_s", v, 0, float64(p.Jobs.MaxWaitS), "jobs.max_wait_s"); err != nil {
		return 0, err
	}
	return time.Duration(math.Round(v*1000)) * time.Millisecond, nil
}

// ResolveIdle resolves a session's idle timeout: nil →
// sessions.idle_timeout_s.default; otherwise 1 s up to
// sessions.idle_timeout_s.max, fractional allowed. Errors are *LimitError
// with Field "idle_timeout_s".
func (p *Policy) ResolveIdle(idleS *float64) (time.Duration, error) {
	r := p.Sessions.IdleTimeoutS
	if idleS == nil {
		return seconds(r.Default), nil
	}
	if err := checkFloat("idle_timeout_s", *idleS, 1, float64(r.Max), "sessions.idle_timeout_s.max"); err != nil {
		return 0, err
	}
	return time.Duration(math.Round(*idleS*1000)) * time.Millisecond, nil
}
