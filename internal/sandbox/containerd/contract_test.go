package containerd_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/sandboxer/sandboxer/images"
	"github.com/sandboxer/sandboxer/internal/sandbox"
	"github.com/sandboxer/sandboxer/internal/sandbox/containerd"
	"github.com/sandboxer/sandboxer/internal/sandbox/sandboxtest"
)

// newTestRuntime is a runtime on the containerd scripts/containerd.sh
// starts (SANDBOXER_CONTAINERD_ADDRESS names another). The tests run only
// with SANDBOXER_TEST_CONTAINERD=1 (make test-containerd).
func newTestRuntime(t *testing.T) *containerd.Runtime {
	t.Helper()
	if os.Getenv("SANDBOXER_TEST_CONTAINERD") != "1" {
		t.Skip("set SANDBOXER_TEST_CONTAINERD=1 (make test-containerd)")
	}
	runc := ""
	if _, err := os.Stat(containerd.PatchedRunc); err == nil {
		runc = containerd.PatchedRunc // as the backend opens it (scripts/runc.sh installed it)
	}
	rt, err := containerd.New("test-"+t.Name(), containerd.Config{Address: os.Getenv("SANDBOXER_CONTAINERD_ADDRESS"), Runc: runc})
	if err != nil {
		t.Fatal(err)
	}
	if err := rt.Ping(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx := context.Background()
		if cs, err := rt.List(ctx); err == nil {
			for _, c := range cs {
				_ = rt.Remove(ctx, c.ID)
			}
		}
		_ = rt.Close()
	})
	return rt
}

// TestContract: the containerd runtime keeps the contract the Docker
// runtime and the fake are held to.
func TestContract(t *testing.T) {
	sandboxtest.RunContract(t, func(t *testing.T) sandbox.Runtime { return newTestRuntime(t) }, images.Tag("base"))
}

// TestCapabilities: every part the containerd runtime declares keeps its
// contract, as Docker's and the fake's do.
func TestCapabilities(t *testing.T) {
	sandboxtest.RunCapabilities(t, func(t *testing.T) sandbox.Engine { return newTestRuntime(t) }, images.Tag("base"))
}

// TestHardeningFromInside: the profile the OCI spec writes, read back from
// inside a sandbox, as on Docker and the fake.
func TestHardeningFromInside(t *testing.T) {
	sandboxtest.RunHardening(t, func(t *testing.T) sandbox.Runtime { return newTestRuntime(t) }, images.Tag("base"), sandboxtest.HardeningOptions{})
}

// TestSandboxesRunOnThePatchedRunc: with Config.Runc, containerd's record of
// a sandbox names that runc as the shim's binary (ctr containers info).
func TestSandboxesRunOnThePatchedRunc(t *testing.T) {
	rt := newTestRuntime(t)
	if rt.Runc() == "" {
		t.Skipf("no %s on this host (scripts/runc.sh installs it when the host's runc has known escapes)", containerd.PatchedRunc)
	}
	out := &sandbox.Buffer{Max: 1 << 20}
	h, err := rt.Start(context.Background(), sandboxtest.Spec(images.Tag("base"), "sleep 30"), out)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Destroy(context.Background())
	sock := os.Getenv("SANDBOXER_CONTAINERD_ADDRESS")
	if sock == "" {
		sock = containerd.DefaultAddress
	}
	info, err := exec.Command("ctr", "-a", strings.TrimPrefix(sock, "unix://"), "-n", containerd.DefaultNamespace, "containers", "info", h.ContainerID()).Output()
	if err != nil {
		t.Fatalf("ctr containers info: %v", err)
	}
	// ctr 1.6 prints the shim's options (containerd.runc.v1.Options) as
	// protobuf bytes: BinaryName is field 6, a string.
	var rec struct {
		Runtime struct {
			Name    string
			Options struct{ Value []byte }
		}
	}
	if err := json.Unmarshal(info, &rec); err != nil {
		t.Fatalf("ctr containers info: %v\n%s", err, info)
	}
	want := append([]byte{6<<3 | 2, byte(len(containerd.PatchedRunc))}, containerd.PatchedRunc...)
	if !bytes.Contains(rec.Runtime.Options.Value, want) {
		t.Errorf("containerd's record of the sandbox names no %s as the shim's runc:\n%s", containerd.PatchedRunc, info)
	}
}
