package template

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/sandboxer/sandboxer/images"
	"github.com/sandboxer/sandboxer/internal/policy"
	"github.com/sandboxer/sandboxer/internal/record"
	"github.com/sandboxer/sandboxer/internal/sandbox"
	"github.com/sandboxer/sandboxer/internal/sandbox/fake"
	"github.com/sandboxer/sandboxer/internal/sandbox/sandboxtest"
	"github.com/sandboxer/sandboxer/internal/store"
	"github.com/sandboxer/sandboxer/internal/tenant"
)

// newFakeManager is a template manager over the fake engine (whose Images
// part keeps the engines' contract, in sandboxtest) and a real store, with
// the policy templates given as name → Dockerfile (plus context files).
func newFakeManager(t *testing.T, diskMB int64, templates map[string]map[string]string) (*Manager, *fake.Runtime) {
	t.Helper()
	if images.Supervisor() == nil {
		t.Skip("this build embeds no supervisor, which every template's image gets (make build)")
	}
	pol := policy.Default()
	pol.TemplateBuilds.DiskMB = diskMB
	for name, files := range templates {
		dir := t.TempDir()
		for file, content := range files {
			if err := os.WriteFile(filepath.Join(dir, file), []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		pol.Templates[name] = policy.Template{Context: dir}
	}
	st, err := store.Open(filepath.Join(t.TempDir(), "s.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	e := fake.New("templates-" + t.Name())
	e.SetImageMissing(templateRepo+"*", true) // a template's images exist once built
	return New(pol, e.Capabilities().Images, st, nil, zerolog.Nop()), e
}

// runOn runs script in a sandbox of image and returns its stdout.
func runOn(t *testing.T, e *fake.Runtime, image, script string) string {
	t.Helper()
	out := &sandbox.Buffer{Max: 1 << 20}
	h, err := e.Start(context.Background(), sandboxtest.Spec(image, script), out)
	if err != nil {
		t.Fatalf("a job on %s: %v", image, err)
	}
	select {
	case <-h.Done():
	case <-time.After(5 * time.Second):
		t.Fatalf("a job on %s did not end", image)
	}
	if st := h.Status(); st.ExitCode != 0 {
		t.Fatalf("a job on %s: exit %d, stderr %q", image, st.ExitCode, out.Stderr())
	}
	return out.Stdout()
}

// TestBuildOnceThenReuse: a template is built once (its RUN output reaches
// progress, a job on its image sees what the build made), found again
// while its inputs stand, rebuilt when its Dockerfile changes (the earlier
// build removed), refused removal while a job runs on it, then removed.
func TestBuildOnceThenReuse(t *testing.T) {
	ctx := context.Background()
	m, e := newFakeManager(t, 1024, map[string]map[string]string{
		"tools": {"Dockerfile": "FROM fake/base:latest\nCOPY motd /etc/motd\nRUN echo tools-step-ran; echo made-by-run > /etc/made\n", "motd": "from-the-context\n"},
	})
	var lines []string
	rec, built, err := m.Build(ctx, "tools", BuildOptions{Progress: func(l string) { lines = append(lines, l) }})
	if err != nil || !built {
		t.Fatalf("first build: built %v, %v", built, err)
	}
	if !strings.Contains(strings.Join(lines, "\n"), "tools-step-ran") {
		t.Errorf("the build's RUN output did not reach progress: %q", lines)
	}
	if rec.Image != ImageOf("tools", rec.Key) || rec.ImageID == "" || rec.SizeBytes <= 0 {
		t.Fatalf("record %+v", rec)
	}
	if got := runOn(t, e, rec.Image, "cat /etc/motd /etc/made"); got != "from-the-context\nmade-by-run\n" {
		t.Fatalf("a job on the template sees %q", got)
	}
	again, built, err := m.Build(ctx, "tools", BuildOptions{})
	if err != nil || built || again.Image != rec.Image {
		t.Fatalf("second build: %+v built %v, %v; want the same image, not built", again, built, err)
	}

	df := filepath.Join(m.pol.Templates["tools"].Context, "Dockerfile")
	if err := os.WriteFile(df, []byte("FROM fake/base:latest\nRUN echo v2 > /etc/made\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	v2, built, err := m.Build(ctx, "tools", BuildOptions{})
	if err != nil || !built || v2.Key == rec.Key {
		t.Fatalf("build after the Dockerfile changed: %+v built %v, %v", v2, built, err)
	}
	if _, err := e.ImageInfo(ctx, rec.Image); !errors.Is(err, sandbox.ErrImageNotFound) {
		t.Errorf("the earlier build's image: %v, want it removed", err)
	}

	busy := &sandbox.Buffer{Max: 1 << 10}
	h, err := e.Start(ctx, sandboxtest.Spec(v2.Image, "sleep 30"), busy)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Remove(ctx, "tools"); err == nil || !strings.Contains(err.Error(), "in use") {
		t.Fatalf("Remove while a job runs on it: %v, want refused as in use", err)
	}
	if err := h.Destroy(ctx); err != nil {
		t.Fatal(err)
	}
	if err := m.Remove(ctx, "tools"); err != nil {
		t.Fatalf("Remove: %v", err)
	}
	if _, err := e.ImageInfo(ctx, v2.Image); !errors.Is(err, sandbox.ErrImageNotFound) {
		t.Errorf("the removed template's image: %v, want it gone", err)
	}
	if err := m.Remove(ctx, "tools"); err == nil || !strings.Contains(err.Error(), "not built") {
		t.Errorf("Remove of a template not built: %v", err)
	}
}

// TestBuildFailureNamesTheStep: a failed RUN is reported with its step,
// exit code and last lines, and leaves no record.
func TestBuildFailureNamesTheStep(t *testing.T) {
	ctx := context.Background()
	m, _ := newFakeManager(t, 1024, map[string]map[string]string{
		"broken": {"Dockerfile": "FROM fake/base:latest\nRUN echo about-to-fail; exit 3\n"},
	})
	_, _, err := m.Build(ctx, "broken", BuildOptions{})
	var be *sandbox.BuildError
	if !errors.As(err, &be) || be.ExitCode != 3 || !strings.Contains(be.Step, "RUN echo about-to-fail") ||
		!strings.Contains(strings.Join(be.Tail, "\n"), "about-to-fail") {
		t.Fatalf("a failing RUN: %v", err)
	}
	if !strings.Contains(err.Error(), "template broken") {
		t.Errorf("the error does not name the template: %v", err)
	}
	if infos := m.List(ctx); len(infos) != 1 || infos[0].Image != "" {
		t.Errorf("after a failed build List says %+v, want the template unbuilt", infos)
	}
}

// TestDiskBudgetRemovesTheLeastRecentlyUsed: past templates_build.disk_mb
// the least recently used template's image goes, never the one just built.
func TestDiskBudgetRemovesTheLeastRecentlyUsed(t *testing.T) {
	ctx := context.Background()
	big := strings.Repeat("x", 9<<20) // each image: the fake's nominal 1 MiB plus this
	m, e := newFakeManager(t, 16, map[string]map[string]string{
		"first":  {"Dockerfile": "FROM fake/base:latest\nCOPY blob /blob\n", "blob": big},
		"second": {"Dockerfile": "FROM fake/base:latest\nCOPY blob /blob\n", "blob": big},
	})
	first, _, err := m.Build(ctx, "first", BuildOptions{})
	if err != nil {
		t.Fatal(err)
	}
	second, _, err := m.Build(ctx, "second", BuildOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.ImageInfo(ctx, first.Image); !errors.Is(err, sandbox.ErrImageNotFound) {
		t.Errorf("the least recently used template over the budget: %v, want its image removed", err)
	}
	if _, err := e.ImageInfo(ctx, second.Image); err != nil {
		t.Errorf("the template just built: %v, want it kept", err)
	}
}

// TestRemoveSnapshot: RemoveSnapshot removes its caller's own snapshot
// only: the policy's template is refused, another tenant's snapshot is not
// found and stays.
func TestRemoveSnapshot(t *testing.T) {
	m, _ := newFakeManager(t, 1024, map[string]map[string]string{
		"tools": {"Dockerfile": "FROM fake/base:latest\n"},
	})
	alice := tenant.With(context.Background(), tenant.Tenant{Name: "alice"})
	bob := tenant.With(context.Background(), tenant.Tenant{Name: "bob"})
	if _, _, err := m.Build(alice, "tools", BuildOptions{}); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	snap := &record.Template{Name: "mine", Tenant: "alice", Source: record.TemplateSnapshot, Language: "python",
		Key: "k", Image: "sandboxer-snapshot-x:k", Workspace: "w", CreatedAt: now, UsedAt: now}
	if err := m.st.PutTemplate(alice, snap); err != nil {
		t.Fatal(err)
	}
	if err := m.RemoveSnapshot(alice, "tools"); err == nil || !strings.Contains(err.Error(), "policy's") {
		t.Errorf("the policy's template: %v", err)
	}
	if err := m.RemoveSnapshot(bob, "mine"); !errors.Is(err, record.ErrTemplateNotFound) {
		t.Errorf("bob removing alice's snapshot: %v", err)
	}
	if _, err := m.st.GetTemplate(alice, "mine"); err != nil {
		t.Fatalf("alice's snapshot after bob's try: %v", err)
	}
	if err := m.RemoveSnapshot(alice, "mine"); err != nil {
		t.Fatal(err)
	}
	if _, err := m.st.GetTemplate(alice, "mine"); !errors.Is(err, record.ErrTemplateNotFound) {
		t.Errorf("alice's snapshot after its removal: %v", err)
	}
	if _, err := m.st.GetTemplate(alice, "tools"); err != nil {
		t.Errorf("the policy's template after it all: %v", err)
	}
}
