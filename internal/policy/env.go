package policy

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Environment variables ApplyEnv reads. An unset or empty variable changes
// nothing.
const (
	// EnvMaxJobs sets jobs.max_concurrent: a whole number >= 1.
	EnvMaxJobs = "SANDBOXER_MAX_JOBS"
	// EnvMaxOutputBytes sets output.max_bytes_per_job: bytes as a whole number,
	// optionally with a binary suffix k/K/KiB, M/MiB, G/GiB (16M = 16 MiB).
	// It must be >= output.inline_bytes.
	EnvMaxOutputBytes = "SANDBOXER_MAX_OUTPUT_BYTES"
	// EnvJobTimeout sets limits.timeout_s.default: whole seconds ("45") or a Go
	// duration of whole seconds ("45s", "2m", "1h30m"). It must not exceed
	// limits.timeout_s.max (raise that in the policy file instead).
	EnvJobTimeout = "SANDBOXER_JOB_TIMEOUT"
	// EnvCleanupInterval sets jobs.cleanup_interval_s: whole seconds or a Go
	// duration of whole seconds, > 0.
	EnvCleanupInterval = "SANDBOXER_CLEANUP_INTERVAL"
	// EnvAllowBlockEdits sets block.agent_edits: true/false (1/0, yes/no).
	EnvAllowBlockEdits = "SANDBOXER_ALLOW_BLOCK_EDITS"
	// EnvBackend sets backend (docker, podman, kubernetes, containerd):
	// `make test-podman` runs the e2e core with it set to podman.
	EnvBackend = "SANDBOXER_BACKEND"
)

// ApplyEnv applies the SANDBOXER_* overrides (see the Env* constants) read
// through getenv (os.Getenv in production). A bad value is an error naming the
// variable and the value; all such errors are returned joined, and the good
// values are applied regardless. Call Validate afterwards.
func (p *Policy) ApplyEnv(getenv func(string) string) error {
	var errs []error
	bad := func(name, val, format string, args ...any) {
		errs = append(errs, fmt.Errorf("policy: %s=%q: %s", name, val, fmt.Sprintf(format, args...)))
	}

	if v := strings.TrimSpace(getenv(EnvBackend)); v != "" {
		p.Backend = v // the configuration checks it against the table of backends
	}

	if v := strings.TrimSpace(getenv(EnvMaxJobs)); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		switch {
		case err != nil:
			bad(EnvMaxJobs, v, "must be a whole number (jobs.max_concurrent)")
		case n < 1 || n > maxConcurrent:
			bad(EnvMaxJobs, v, "must be between 1 and %d (jobs.max_concurrent)", maxConcurrent)
		default:
			p.Jobs.MaxConcurrent = int(n)
		}
	}

	if v := strings.TrimSpace(getenv(EnvMaxOutputBytes)); v != "" {
		n, err := parseBytes(v)
		switch {
		case err != nil:
			bad(EnvMaxOutputBytes, v, "%v (output.max_bytes_per_job)", err)
		case n < 1 || n > maxBytes:
			bad(EnvMaxOutputBytes, v, "must be between 1 and %d bytes (output.max_bytes_per_job)", int64(maxBytes))
		case n < p.Output.InlineBytes:
			bad(EnvMaxOutputBytes, v, "%d bytes is below output.inline_bytes (%d)", n, p.Output.InlineBytes)
		default:
			p.Output.MaxBytesPerJob = n
		}
	}

	if v := strings.TrimSpace(getenv(EnvJobTimeout)); v != "" {
		s, err := parseSeconds(v)
		switch {
		case err != nil:
			bad(EnvJobTimeout, v, "%v (limits.timeout_s.default)", err)
		case s > p.Limits.TimeoutS.Max:
			bad(EnvJobTimeout, v, "%ds is over limits.timeout_s.max (%d); raise that in the policy file", s, p.Limits.TimeoutS.Max)
		default:
			p.Limits.TimeoutS.Default = s
		}
	}

	if v := strings.TrimSpace(getenv(EnvAllowBlockEdits)); v != "" {
		switch strings.ToLower(v) {
		case "1", "true", "yes", "on":
			p.Block.AgentEdits = true
		case "0", "false", "no", "off":
			p.Block.AgentEdits = false
		default:
			bad(EnvAllowBlockEdits, v, "must be true or false (block.agent_edits)")
		}
	}

	if v := strings.TrimSpace(getenv(EnvCleanupInterval)); v != "" {
		s, err := parseSeconds(v)
		switch {
		case err != nil:
			bad(EnvCleanupInterval, v, "%v (jobs.cleanup_interval_s)", err)
		case s > maxSeconds:
			bad(EnvCleanupInterval, v, "must be at most %ds (jobs.cleanup_interval_s)", int64(maxSeconds))
		default:
			p.Jobs.CleanupIntervalS = s
		}
	}

	return errors.Join(errs...)
}

var bytesPattern = regexp.MustCompile(`^([0-9]+)([kKmMgG](?:iB)?)?$`)

// parseBytes parses "1048576", "64k", "16M", "16MiB", "1G".
func parseBytes(s string) (int64, error) {
	m := bytesPattern.FindStringSubmatch(s)
	if m == nil {
		return 0, errors.New("must be a whole number of bytes, optionally with a k/M/G (KiB/MiB/GiB) suffix")
	}
	n, err := strconv.ParseInt(m[1], 10, 64)
	if err != nil {
		return 0, errors.New("number out of range")
	}
	var shift uint
	if m[2] != "" {
		switch m[2][0] {
		case 'k', 'K':
			shift = 10
		case 'm', 'M':
			shift = 20
		case 'g', 'G':
			shift = 30
		}
	}
	if n > (1<<62)>>shift {
		return 0, errors.New("number out of range")
	}
	return n << shift, nil
}

// parseSeconds parses whole seconds ("45") or a Go duration of whole seconds
// ("45s", "2m"); the result is > 0.
func parseSeconds(s string) (int64, error) {
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		if n <= 0 {
			return 0, errors.New("must be > 0")
		}
		return n, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, errors.New(`must be whole seconds ("45") or a Go duration ("45s", "2m")`)
	}
	if d <= 0 {
		return 0, errors.New("must be > 0")
	}
	if d%time.Second != 0 {
		return 0, errors.New("must be a whole number of seconds")
	}
	return int64(d / time.Second), nil
}
