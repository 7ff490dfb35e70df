package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/sandboxer/sandboxer/internal/backend"
	"github.com/sandboxer/sandboxer/internal/policy"
	"github.com/sandboxer/sandboxer/internal/serverlock"
)

// doctor checks the policy's secrets, then whatever the backend's row of
// the table checks (internal/backend).
func doctor(args []string) error {
	cfg, err := loadConfig("doctor", args)
	if err != nil {
		return err
	}
	b, err := backend.Of(cfg.Policy)
	if err != nil {
		return err
	}
	problems := 0
	// A check that passes with a "warning: " detail is shown as one, with
	// its fix, and fails nothing.
	report := func(ok bool, what, detail, fix string) {
		mark, warn := "ok  ", false
		if d, isWarning := strings.CutPrefix(detail, "warning: "); ok && isWarning {
			mark, warn, detail = "warn", true, d
		}
		if !ok {
			mark = "FAIL"
			problems++
		}
		fmt.Printf("%s %-22s %s\n", mark, what, detail)
		if (!ok || warn) && fix != "" {
			fmt.Printf("     fix: %s\n", fix)
		}
	}
	// Labelled like a server of this state directory, with its own identity:
	// if doctor dies mid-check, the next server sweeps its container away.
	lock, err := serverlock.Acquire(cfg.StateDir)
	if err != nil {
		return err
	}
	defer lock.Release()
	reportSecrets(cfg.Policy, report)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := b.Doctor(ctx, backend.Options{Policy: cfg.Policy, Instance: cfg.Instance(), Server: lock.ID()}, report); err != nil {
		return err
	}
	if problems > 0 {
		return fmt.Errorf("%d problem(s)", problems)
	}
	fmt.Println("all checks passed")
	return nil
}

// reportSecrets checks each secret's value can be read now (never showing
// it) and names the hosts it goes to (the policy's load checked that they
// lie within egress.allow).
func reportSecrets(pol *policy.Policy, report backend.Report) {
	for _, name := range pol.SecretNames() {
		sec := pol.Secrets[name]
		where := "env " + sec.Env
		if sec.ValueFile != "" {
			where = "value_file " + sec.ValueFile
		}
		detail := fmt.Sprintf("%s: readable; goes to %s only", where, strings.Join(sec.Hosts, ", "))
		_, err := sec.Source().Read(os.Getenv)
		if err != nil {
			detail = err.Error()
		}
		report(err == nil, "secret "+name, detail, "fix policy key secrets."+name+": a mode-0600 file the server can read, or a variable set in its environment")
	}
}
