package main

import (
	"context"
	"flag"
	"fmt"
	"os"

	"github.com/sandboxer/sandboxer/images"
	"github.com/sandboxer/sandboxer/internal/sandbox/docker"
)

func imagesCmd(args []string) error {
	if len(args) == 0 {
		return fmt.Errorf("images: want build or list\n%s", usage)
	}
	sub, args := args[0], args[1:]
	fs := flag.NewFlagSet("images "+sub, flag.ContinueOnError)
	force := fs.Bool("force", false, "rebuild every image (core and final) without the build cache, even when its tag exists")
	if err := fs.Parse(args); err != nil {
		return err
	}
	rt, err := docker.New("")
	if err != nil {
		return err
	}
	defer rt.Close()
	ctx := context.Background()
	if err := rt.Ping(ctx); err != nil {
		return err
	}
	switch sub {
	case "build":
		built, err := docker.EnsureImages(ctx, rt.Client(), *force, os.Stderr)
		if err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "images: %d built, all present\n", len(built))
		return nil
	case "list":
		for _, img := range images.All() {
			ok, err := rt.ImageExists(ctx, images.Tag(img.Name))
			if err != nil {
				return err
			}
			state := "built"
			switch {
			case ok:
			case images.Supervisor() == nil:
				state = "missing (this binary has no supervisor: make build, then make images)"
			default:
				state = "missing (sandboxer images build)"
			}
			fmt.Printf("%-12s %-34s %s\n", img.Name, images.Tag(img.Name), state)
		}
		return nil
	}
	return fmt.Errorf("images: unknown subcommand %q (want build or list)", sub)
}
