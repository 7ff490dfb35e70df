package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/sandboxer/sandboxer/internal/config"
	"github.com/sandboxer/sandboxer/internal/server"
	"github.com/sandboxer/sandboxer/internal/store"
	"github.com/sandboxer/sandboxer/internal/template"
)

// templatesCmd is `sandboxer templates build|list|rm`: the policy's
// templates, built through the engine, recorded in the state directory's
// store (the server reads the same records).
func templatesCmd(args []string) error {
	if len(args) == 0 {
		return fmt.Errorf("templates: want build, list or rm\n%s", usage)
	}
	sub, args := args[0], args[1:]
	fs := flag.NewFlagSet("templates "+sub, flag.ContinueOnError)
	flags := config.RegisterFlags(fs)
	noCache := fs.Bool("no-cache", false, "build: rebuild even when the image of the current key exists, without the engine's layer cache")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg, err := flags.Load(os.Getenv)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(cfg.StateDir, 0o700); err != nil {
		return err
	}
	st, err := store.Open(filepath.Join(cfg.StateDir, "sandboxer.db"))
	if err != nil {
		return err
	}
	defer st.Close()
	engine, err := server.NewEngine(cfg, "templates", nil)
	if err != nil {
		return err
	}
	defer engine.Close()
	ctx := context.Background()
	if err := engine.Ping(ctx); err != nil {
		return err
	}
	m := template.New(cfg.Policy, engine.Capabilities().Images, st, nil, zerolog.New(os.Stderr).With().Timestamp().Logger())
	if !m.Supported() {
		return template.ErrUnsupported
	}
	names := fs.Args()
	switch sub {
	case "build":
		if len(names) == 0 {
			names = m.Names()
		}
		if len(names) == 0 {
			return fmt.Errorf("templates build: the policy names no templates (policy key templates)")
		}
		for _, name := range names {
			start := time.Now()
			rec, built, err := m.Build(ctx, name, template.BuildOptions{NoCache: *noCache,
				Progress: func(line string) { fmt.Fprintln(os.Stderr, line) }})
			if err != nil {
				return err
			}
			state := "up to date"
			if built {
				state = "built"
			}
			fmt.Printf("%-16s %-44s %s in %.2f s\n", name, rec.Image, state, time.Since(start).Seconds())
		}
		return nil
	case "list":
		fmt.Printf("%-16s %-10s %-12s %-12s %-8s %s\n", "NAME", "LANGUAGE", "SOURCE", "KEY", "MIB", "IMAGE")
		for _, t := range m.List(ctx) {
			image := t.Image
			if image == "" {
				image = "(not built: sandboxer templates build " + t.Name + ")"
			}
			if t.Problem != "" {
				image = "problem: " + t.Problem
			}
			source := t.Source
			if t.Workspace != "" {
				source = "snapshot of " + t.Tenant + "/" + t.Workspace
			}
			fmt.Printf("%-16s %-10s %-12s %-12s %-8d %s\n", t.Name, t.Language, source, t.Key, (t.SizeBytes+1<<20-1)>>20, image)
		}
		return nil
	case "rm":
		if len(names) == 0 {
			return fmt.Errorf("templates rm: name the templates to remove")
		}
		var failed []string
		for _, name := range names {
			if err := m.Remove(ctx, name); err != nil {
				fmt.Fprintf(os.Stderr, "templates rm %s: %v\n", name, err)
				failed = append(failed, name)
				continue
			}
			fmt.Printf("removed %s\n", name)
		}
		if len(failed) > 0 {
			return fmt.Errorf("templates rm: not removed: %s", strings.Join(failed, ", "))
		}
		return nil
	}
	return fmt.Errorf("templates: unknown subcommand %q (want build, list or rm)", sub)
}
