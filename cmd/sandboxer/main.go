// Command sandboxer is an MCP server that runs agents' commands in hardened
// sandboxes. It stays thin: it parses flags and hands the configuration to
// internal/server, which assembles and runs the server.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/sandboxer/sandboxer/internal/config"
	"github.com/sandboxer/sandboxer/internal/logging"
	"github.com/sandboxer/sandboxer/internal/mcpserver"
	"github.com/sandboxer/sandboxer/internal/server"
)

const usage = `usage: sandboxer <command> [flags]

commands:
  serve          serve MCP over stdio (the default)
  images build   build the sandbox images through the Engine API (--force rebuilds)
  images list    show each image's tag and whether it is built
  templates build [NAME...]  build the policy's templates (--no-cache rebuilds)
  templates list             show each template's key, size and image
  templates rm NAME...       remove templates (never one in use)
  doctor         check the engine, the images and the hardening profile
  audit          print the audit log (--job ID, --since 1h or 2026-01-02T15:04:05Z, --state-dir DIR, --json)
  version        print the version
`

func main() {
	args := os.Args[1:]
	cmd := "serve"
	if len(args) > 0 && args[0] != "" && args[0][0] != '-' {
		cmd, args = args[0], args[1:]
	}
	var err error
	switch cmd {
	case "serve":
		err = serve(args)
	case "images":
		err = imagesCmd(args)
	case "templates":
		err = templatesCmd(args)
	case "doctor":
		err = doctor(args)
	case "audit":
		err = auditCmd(args)
	case "version":
		fmt.Println(mcpserver.Version)
	case "help", "-h", "--help":
		fmt.Print(usage)
	default:
		fmt.Fprintf(os.Stderr, "unknown command %q\n%s", cmd, usage)
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "sandboxer:", err)
		os.Exit(1)
	}
}

// loadConfig parses a command's flags and resolves the configuration.
func loadConfig(name string, args []string) (*config.Config, error) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	flags := config.RegisterFlags(fs)
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	return flags.Load(os.Getenv)
}

// serve runs the server until stdin ends (stdio) or a signal comes.
func serve(args []string) error {
	cfg, err := loadConfig("serve", args)
	if err != nil {
		return err
	}
	log, err := logging.New(os.Stderr, cfg.LogLevel)
	if err != nil {
		return err
	}
	srv, err := server.New(cfg, log)
	if err != nil {
		return err
	}
	defer srv.Close()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	return srv.Serve(ctx, os.Stdin, os.Stdout)
}
