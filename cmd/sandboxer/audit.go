package main

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/sandboxer/sandboxer/internal/audit"
	"github.com/sandboxer/sandboxer/internal/config"
)

// auditCmd prints the audit log of a state dir, filtered.
func auditCmd(args []string) error {
	fs := flag.NewFlagSet("audit", flag.ContinueOnError)
	stateDir := fs.String("state-dir", "", "state directory (env "+config.EnvStateDir+"; default as serve)")
	jobID := fs.String("job", "", "only lines about this job id")
	since := fs.String("since", "", "only lines from the last DURATION (e.g. 90m, 24h) or since TIME (RFC 3339)")
	asJSON := fs.Bool("json", false, "print the JSON lines as stored")
	if err := fs.Parse(args); err != nil {
		return err
	}
	dir := *stateDir
	if dir == "" {
		dir = os.Getenv(config.EnvStateDir)
	}
	if dir == "" {
		dir = config.DefaultStateDir(os.Getenv)
	}
	f := audit.Filter{JobID: strings.TrimSpace(*jobID)}
	if s := strings.TrimSpace(*since); s != "" {
		if d, err := time.ParseDuration(s); err == nil {
			f.Since = time.Now().Add(-d)
		} else if t, err := time.Parse(time.RFC3339, s); err == nil {
			f.Since = t
		} else {
			return fmt.Errorf("--since %q: want a duration like 90m or a time like 2026-01-02T15:04:05Z", s)
		}
	}
	return audit.Read(dir, f, func(e audit.Entry, line []byte) error {
		if *asJSON {
			_, err := os.Stdout.Write(line)
			return err
		}
		var b strings.Builder
		fmt.Fprintf(&b, "%s %-16s %-8s %-12s", e.Time.Local().Format("2006-01-02 15:04:05"), e.Tool, e.Decision, e.Outcome)
		if e.JobID != "" {
			fmt.Fprintf(&b, " job=%s", e.JobID)
		}
		if e.Client != "" {
			fmt.Fprintf(&b, " client=%q", e.Client)
		}
		if e.Rule != "" {
			fmt.Fprintf(&b, " rule=%q", e.Rule)
		}
		if e.Command != "" {
			fmt.Fprintf(&b, " command=%q", e.Command)
		}
		if e.ScriptSHA256 != "" {
			fmt.Fprintf(&b, " sha256=%s", e.ScriptSHA256[:16])
		}
		if e.Error != "" {
			fmt.Fprintf(&b, " error=%q", e.Error)
		}
		_, err := fmt.Println(b.String())
		return err
	})
}
