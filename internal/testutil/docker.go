// Package testutil holds helpers shared by tests that need the Docker engine.
package testutil

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/sandboxer/sandboxer/internal/sandbox/docker"
)

// RequireDocker skips the test with a clear message when no engine answers,
// except under CI=true, where a missing engine is a failure. Under -short
// (the pure unit tests: make test-unit) every engine test skips.
func RequireDocker(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("engine test: skipped under -short")
	}
	rt, err := docker.New("")
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err = rt.Ping(ctx)
		cancel()
		rt.Close()
	}
	if err == nil {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("Docker engine required under CI=true: %v", err)
	}
	t.Skipf("skipping: Docker engine not reachable (%v); run `make engine` to start one", err)
}
