package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"strings"
	"time"
)

// bestFile keeps, per machine, the best warm `run_command true` p50 the
// bench has measured there: the guard below compares each run with it.
const bestFile = "docs/benchmark-best.json"

// regressionFactor: a warm p50 above this many times the machine's recorded
// best fails the bench, loudly, in its own output (never in make test).
const regressionFactor = 1.5

// bestRecord is one machine's best warm `true`.
type bestRecord struct {
	P50MS  float64   `json:"p50_ms"`
	When   time.Time `json:"when"`
	Commit string    `json:"commit"`
}

// machineID names this machine (/etc/machine-id): records of other
// machines are never compared.
func machineID() string {
	b, err := os.ReadFile("/etc/machine-id")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// checkBest compares a warm `true` p50 with this machine's recorded best: it
// prints the row, records a new best, and returns an error when the p50 is
// more than regressionFactor times the best.
func checkBest(p50 time.Duration) error {
	id := machineID()
	if id == "" {
		fmt.Printf("  warm true vs recorded best: no /etc/machine-id, not compared\n")
		return nil
	}
	records := map[string]bestRecord{}
	data, err := os.ReadFile(bestFile)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return fmt.Errorf("%s: %w", bestFile, err)
	default:
		if err := json.Unmarshal(data, &records); err != nil {
			return fmt.Errorf("%s: %w", bestFile, err)
		}
	}
	now := ms(p50)
	best, ok := records[id]
	if ok && now > best.P50MS*regressionFactor {
		fmt.Printf("  REGRESSION: warm true p50 %.2f ms is %.2f× this machine's recorded best %.2f ms (%s, %s); the limit is %.1f×\n",
			now, now/best.P50MS, best.P50MS, best.When.Format("2006-01-02"), best.Commit, regressionFactor)
		return fmt.Errorf("warm true p50 %.2f ms is more than %.1f× the recorded best %.2f ms (%s)", now, regressionFactor, best.P50MS, bestFile)
	}
	if ok {
		fmt.Printf("  warm true p50 %.2f ms: %.2f× this machine's recorded best %.2f ms (%s, %s; fails above %.1f×)\n",
			now, now/best.P50MS, best.P50MS, best.When.Format("2006-01-02"), best.Commit, regressionFactor)
	}
	if !ok || now < best.P50MS {
		commit, _ := exec.Command("git", "rev-parse", "--short", "HEAD").Output()
		records[id] = bestRecord{P50MS: now, When: time.Now().UTC(), Commit: strings.TrimSpace(string(commit))}
		out, err := json.MarshalIndent(records, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(bestFile, append(out, '\n'), 0o644); err != nil {
			return fmt.Errorf("record the best: %w", err)
		}
		fmt.Printf("  warm true p50 %.2f ms: this machine's best so far, recorded in %s\n", now, bestFile)
	}
	return nil
}
