package tools

import (
	"fmt"
	"path"
	"regexp"
	"sort"
	"strings"
	"unicode/utf8"
)

// Input bounds. Everything an agent sends is checked against these before any
// Docker call.
const (
	maxCommandBytes  = 128 << 10
	maxStdinBytes    = 1 << 20
	maxEnvVars       = 64
	maxEnvValueBytes = 32 << 10
	maxCwdBytes      = 1024
	workspaceRoot    = "/workspace"
)

var envKeyPattern = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,127}$`)

// Env keys that would change how every program in the sandbox loads or runs;
// the sandbox would contain the damage, but an agent has no honest need for them.
var deniedEnvPrefixes = []string{"LD_", "DYLD_"}

// Env names that change how the shell starts or finds programs: with them a
// command fails in puzzling ways (PATH=/nowhere → exit 127) or runs code it
// does not show (BASH_ENV, ENV). Refused, each with its reason.
var deniedEnvNames = map[string]string{
	"PATH":           "it decides where every command is found; the image sets it (call programs by their full path instead)",
	"BASH_ENV":       "bash runs the file it names before every command",
	"ENV":            "sh runs the file it names at start",
	"SHELLOPTS":      "it changes how every bash starts",
	"BASHOPTS":       "it changes how every bash starts",
	"PS4":            "it is evaluated by bash when tracing",
	"PROMPT_COMMAND": "bash runs it before every prompt",
	"IFS":            "it changes how the shell splits every word",
	"GCONV_PATH":     "it changes which code the C library loads",
}

func checkText(field, s string, max int) error {
	if len(s) > max {
		return fmt.Errorf("%s is %d bytes; the limit is %d", field, len(s), max)
	}
	if strings.IndexByte(s, 0) >= 0 {
		return fmt.Errorf("%s contains a NUL byte, which cannot be passed to a process", field)
	}
	if !utf8.ValidString(s) {
		return fmt.Errorf("%s is not valid UTF-8", field)
	}
	return nil
}

func validateCommand(field, cmd string) error {
	if strings.TrimSpace(cmd) == "" {
		return fmt.Errorf("%s is empty: give a shell command to run", field)
	}
	return checkText(field, cmd, maxCommandBytes)
}

// validateCwd accepts /workspace or a path below it (relative paths are taken
// from /workspace). Anything that escapes it, or names /proc-style magic, is refused.
func validateCwd(cwd string) (string, error) {
	if cwd == "" {
		return workspaceRoot, nil
	}
	if err := checkText("cwd", cwd, maxCwdBytes); err != nil {
		return "", err
	}
	p := cwd
	if !strings.HasPrefix(p, "/") {
		p = workspaceRoot + "/" + p
	}
	for _, part := range strings.Split(p, "/") {
		if part == ".." {
			return "", fmt.Errorf("cwd %q contains '..': give a path inside %s", cwd, workspaceRoot)
		}
	}
	clean := path.Clean(p)
	if clean != workspaceRoot && !strings.HasPrefix(clean, workspaceRoot+"/") {
		return "", fmt.Errorf("cwd %q is outside %s: the working directory must be %s or below it", cwd, workspaceRoot, workspaceRoot)
	}
	return clean, nil
}

// validateEnv checks keys and values and returns KEY=VALUE pairs sorted by key.
func validateEnv(env map[string]string) ([]string, error) {
	if len(env) > maxEnvVars {
		return nil, fmt.Errorf("env has %d variables; the limit is %d", len(env), maxEnvVars)
	}
	keys := make([]string, 0, len(env))
	for k := range env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := make([]string, 0, len(keys))
	for _, k := range keys {
		if !envKeyPattern.MatchString(k) {
			return nil, fmt.Errorf("env key %q is not a valid name (letters, digits and _, not starting with a digit, at most 128)", k)
		}
		if why, ok := deniedEnvNames[k]; ok {
			return nil, fmt.Errorf("env key %q is not allowed: %s", k, why)
		}
		for _, p := range deniedEnvPrefixes {
			if strings.HasPrefix(k, p) {
				return nil, fmt.Errorf("env key %q is not allowed (keys starting with %s change how programs load)", k, p)
			}
		}
		if err := checkText("env value of "+k, env[k], maxEnvValueBytes); err != nil {
			return nil, err
		}
		out = append(out, k+"="+env[k])
	}
	return out, nil
}

var jobIDPattern = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)

func validateJobID(id string) error {
	if id == "" {
		return fmt.Errorf("job_id is required")
	}
	if !jobIDPattern.MatchString(id) {
		return fmt.Errorf("job_id %q is not a job id (a uuid from run_command or list_jobs)", truncate(id, 64))
	}
	return nil
}
