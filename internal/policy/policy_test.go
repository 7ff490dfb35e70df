package policy

import (
	"bytes"
	"errors"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

func writeFile(t *testing.T, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestDefaultValidates(t *testing.T) {
	if err := Default().Validate(); err != nil {
		t.Fatalf("Default().Validate() = %v", err)
	}
}

func TestKubernetesBackendValidates(t *testing.T) {
	p := Default()
	p.Backend, p.Kubernetes = BackendKubernetes, Kubernetes{Namespace: "sandboxer", Kubeconfig: "/root/.kube/config", MountMB: 64}
	p.Mounts = []Mount{{Name: "src", Source: t.TempDir()}} // copied into its pods
	p.Runtime = RuntimeRunsc                               // a RuntimeClass
	if err := p.Validate(); err != nil {
		t.Fatalf("backend kubernetes with the other defaults: %v", err)
	}
}

func TestDefaultIsFresh(t *testing.T) {
	a := Default()
	a.Languages["python"] = Language{Image: "x"}
	a.Limits.MemoryMB.Max = 1
	if b := Default(); len(b.Languages) != 0 || b.Limits.MemoryMB.Max != 4096 {
		t.Fatalf("Default() shares state between calls: %+v", b)
	}
}

func TestDefaultYAMLEqualsDefault(t *testing.T) {
	const path = "../../policies/default.yaml"
	p, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	if want := Default(); !reflect.DeepEqual(p, want) {
		t.Fatalf("%s differs from Default():\n got  %+v\n want %+v", path, p, want)
	}

	// Also: the file names every key (it is the operators' reference), so
	// overlaying it onto a zeroed policy must reproduce Default() too.
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	zero := &Policy{}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(zero); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(zero, Default()) {
		t.Fatalf("%s does not spell out every key:\n got  %+v\n want %+v", path, zero, Default())
	}
}

func TestStrictYAML(t *testing.T) {
	p, err := Load("../../policies/strict.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	d := Default()
	if p.Limits.TimeoutS.Max != 300 || p.Limits.MemoryMB.Max != 1024 || p.Limits.CPUs.Max != 1 ||
		p.Limits.Pids.Max != 256 || p.Jobs.MaxConcurrent != 2 ||
		p.Output.MaxBytesPerJob >= d.Output.MaxBytesPerJob || p.Output.InlineBytes >= d.Output.InlineBytes {
		t.Fatalf("strict.yaml is not strict: %+v", p)
	}
}

func TestLoadPartialOverlay(t *testing.T) {
	p, err := Load(writeFile(t, `
limits:
  memory_mb:
    max: 8192
jobs:
  max_concurrent: 8
network: bridge
languages:
  python:
    image: registry.example.com:5000/team/python:3.12-slim
`))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	want := Default()
	want.Limits.MemoryMB.Max = 8192
	want.Jobs.MaxConcurrent = 8
	want.Network = "bridge"
	want.Languages["python"] = Language{Image: "registry.example.com:5000/team/python:3.12-slim"}
	if !reflect.DeepEqual(p, want) {
		t.Fatalf("got %+v\nwant %+v", p, want)
	}
	if img, ok := p.Image("python"); !ok || img != want.Languages["python"].Image {
		t.Fatalf("Image(python) = %q, %v", img, ok)
	}
	if _, ok := p.Image("go"); ok {
		t.Fatal("Image(go) found")
	}
}

func TestLoadEmptyAndNulls(t *testing.T) {
	for _, content := range []string{"", "# only a comment\n", "---\n", "~\n", "limits:\nlanguages:\n"} {
		p, err := Load(writeFile(t, content))
		if err != nil {
			t.Fatalf("%q: %v", content, err)
		}
		if !reflect.DeepEqual(p, Default()) {
			t.Fatalf("%q: got %+v", content, p)
		}
	}
}

func TestLoadMissingFile(t *testing.T) {
	_, err := Load(filepath.Join(t.TempDir(), "nope.yaml"))
	if err == nil || !strings.Contains(err.Error(), "nope.yaml") || !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("err = %v", err)
	}
}

func TestLoadErrors(t *testing.T) {
	tests := []struct {
		name    string
		content string
		want    []string // substrings of the error
	}{
		{"unknown top key", "limitz: {}\n", []string{"line 1: limitz: unknown key", "limits"}},
		{"unknown nested key", "limits:\n  memory_mb:\n    maximum: 5\n", []string{"line 3: limits.memory_mb.maximum: unknown key", "default, max"}},
		{"unknown language key", "languages:\n  python:\n    img: x\n", []string{"languages.python.img: unknown key"}},
		{"duplicate top key", "network: none\nnetwork: bridge\n", []string{"line 2: network: duplicate key (first at line 1)"}},
		{"duplicate nested key", "limits:\n  pids:\n    max: 5\n    max: 6\n", []string{"line 4: limits.pids.max: duplicate key (first at line 3)"}},
		{"duplicate language", "languages:\n  go:\n    image: golang\n  go:\n    image: golang\n", []string{"languages.go: duplicate key"}},
		{"fraction into int", "limits:\n  memory_mb:\n    max: 1.5\n", []string{"limits.memory_mb.max: must be a whole number, got \"1.5\""}},
		{"string into int", "jobs:\n  max_queued: lots\n", []string{"jobs.max_queued: must be a whole number"}},
		{"huge int", "output:\n  ring_bytes: 99999999999999999999999\n", []string{"output.ring_bytes: must be a whole number"}},
		{"string into float", "limits:\n  cpus:\n    max: two\n", []string{"limits.cpus.max: must be a number"}},
		{"int into string", "runtime: 5\n", []string{"runtime: must be a string"}},
		{"null scalar", "limits:\n  tmp_mb:\n", []string{"limits.tmp_mb: has no value"}},
		{"scalar for mapping", "limits: 5\n", []string{"limits: must be a mapping"}},
		{"list for scalar", "network: [none]\n", []string{"network: must be a single value"}},
		{"top level list", "- a\n", []string{"the policy file: must be a mapping"}},
		{"two documents", "network: none\n---\nnetwork: bridge\n", []string{"more than one YAML document"}},
		{"syntax", "limits: {\n", []string{"yaml:"}},
		{"merge key", "base: &b {max: 5}\n", []string{"base: unknown key"}},
		{"merge key used", "limits:\n  pids:\n    <<: {max: 5}\n", []string{"limits.pids.<<: YAML merge keys are not supported"}},
		{"several at once", "foo: 1\nbar: 2\n", []string{"foo: unknown key", "bar: unknown key"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := writeFile(t, tt.content)
			_, err := Load(path)
			if err == nil {
				t.Fatal("no error")
			}
			msg := err.Error()
			for _, line := range strings.Split(msg, "\n") {
				if !strings.HasPrefix(line, "policy: "+path+": ") {
					t.Errorf("error line does not start with the path: %q", line)
				}
			}
			for _, w := range tt.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error %q does not contain %q", msg, w)
				}
			}
		})
	}
}

// TestYAMLRejectsDuplicates checks that yaml v3 itself (our second pass)
// refuses duplicate keys, independent of our own first-pass check.
func TestYAMLRejectsDuplicates(t *testing.T) {
	dec := yaml.NewDecoder(strings.NewReader("network: none\nnetwork: bridge\n"))
	dec.KnownFields(true)
	var p Policy
	err := dec.Decode(&p)
	if err == nil || !strings.Contains(err.Error(), "already defined") {
		t.Fatalf("yaml v3 accepted a duplicate key: %v", err)
	}
}

func TestValidateErrors(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(p *Policy)
		want   string
	}{
		{"timeout default 0", func(p *Policy) { p.Limits.TimeoutS.Default = 0 }, "policy: limits.timeout_s.default: must be > 0, got 0"},
		{"timeout max too big", func(p *Policy) { p.Limits.TimeoutS.Max = 86401 }, "policy: limits.timeout_s.max: must be <= 86400, got 86401"},
		{"timeout default > max", func(p *Policy) { p.Limits.TimeoutS.Default = 4000 }, "policy: limits.timeout_s.max: must be >= limits.timeout_s.default (4000), got 3600"},
		{"memory default small", func(p *Policy) { p.Limits.MemoryMB.Default = 8 }, "policy: limits.memory_mb.default: must be >= 16, got 8"},
		{"memory max < default", func(p *Policy) { p.Limits.MemoryMB.Max = 256 }, "policy: limits.memory_mb.max: must be >= limits.memory_mb.default (512), got 256"},
		{"memory max negative", func(p *Policy) { p.Limits.MemoryMB.Max = -1 }, "policy: limits.memory_mb.max: must be >= 16, got -1"},
		{"cpus 0", func(p *Policy) { p.Limits.CPUs.Default = 0 }, "policy: limits.cpus.default: must be > 0, got 0"},
		{"cpus NaN", func(p *Policy) { p.Limits.CPUs.Max = math.NaN() }, "policy: limits.cpus.max: must be a finite number"},
		{"cpus Inf", func(p *Policy) { p.Limits.CPUs.Max = math.Inf(1) }, "policy: limits.cpus.max: must be a finite number"},
		{"cpus > 64", func(p *Policy) { p.Limits.CPUs.Max = 65 }, "policy: limits.cpus.max: must be <= 64, got 65"},
		{"cpus max < default", func(p *Policy) { p.Limits.CPUs.Max = 0.5 }, "policy: limits.cpus.max: must be >= limits.cpus.default (1), got 0.5"},
		{"pids small", func(p *Policy) { p.Limits.Pids.Default = 8 }, "policy: limits.pids.default: must be >= 16, got 8"},
		{"open files", func(p *Policy) { p.Limits.OpenFiles = 0 }, "policy: limits.open_files: must be >= 16, got 0"},
		{"file size", func(p *Policy) { p.Limits.FileSizeMB = -5 }, "policy: limits.file_size_mb: must be > 0, got -5"},
		{"tmp", func(p *Policy) { p.Limits.TmpMB = 0 }, "policy: limits.tmp_mb: must be > 0, got 0"},
		{"workdir huge", func(p *Policy) { p.Limits.WorkdirMB = 1 << 30 }, "policy: limits.workdir_mb: must be <= 1048576"},
		{"inline 0", func(p *Policy) { p.Output.InlineBytes = 0 }, "policy: output.inline_bytes: must be > 0, got 0"},
		{"max bytes < inline", func(p *Policy) { p.Output.MaxBytesPerJob = 1000 }, "policy: output.max_bytes_per_job: must be >= output.inline_bytes (16384), got 1000"},
		{"ring 0", func(p *Policy) { p.Output.RingBytes = 0 }, "policy: output.ring_bytes: must be > 0, got 0"},
		{"goproxy with a quote", func(p *Policy) { p.Workspaces.InstallGoProxy = `https://x"y` }, "policy: workspaces.install_goproxy: "},
		{"goproxy empty", func(p *Policy) { p.Workspaces.InstallGoProxy = "" }, "policy: workspaces.install_goproxy: "},
		{"gosumdb newline", func(p *Policy) { p.Workspaces.InstallGoSumDB = "off\nX=1" }, "policy: workspaces.install_gosumdb: "},
		{"concurrent 0", func(p *Policy) { p.Jobs.MaxConcurrent = 0 }, "policy: jobs.max_concurrent: must be > 0, got 0"},
		{"queued negative", func(p *Policy) { p.Jobs.MaxQueued = -1 }, "policy: jobs.max_queued: must be >= 0, got -1"},
		{"retention 0", func(p *Policy) { p.Jobs.RetentionS = 0 }, "policy: jobs.retention_s: must be > 0, got 0"},
		{"cleanup 0", func(p *Policy) { p.Jobs.CleanupIntervalS = 0 }, "policy: jobs.cleanup_interval_s: must be > 0, got 0"},
		{"max wait 0", func(p *Policy) { p.Jobs.MaxWaitS = 0 }, "policy: jobs.max_wait_s: must be > 0, got 0"},
		{"default wait > max", func(p *Policy) { p.Jobs.DefaultWaitS = 301 }, "policy: jobs.default_wait_s: must be <= jobs.max_wait_s (50), got 301"},
		{"default wait negative", func(p *Policy) { p.Jobs.DefaultWaitS = -1 }, "policy: jobs.default_wait_s: must be >= 0, got -1"},
		{"network", func(p *Policy) { p.Network = "host" }, `policy: network: must be "none", "bridge" or "egress", got "host"`},
		{"network empty", func(p *Policy) { p.Network = "" }, `policy: network: must be "none", "bridge" or "egress", got ""`},
		{"egress without hosts", func(p *Policy) { p.Network = NetworkEgress }, `policy: egress.allow: must name at least one host with network: egress`},
		{"egress bad host", func(p *Policy) { p.Egress.Allow = []string{"http://x.com"} }, `policy: egress.allow: allowlist entry "http://x.com"`},
		{"runtime", func(p *Policy) { p.Runtime = "runsc; rm -rf /" }, `policy: runtime: invalid OCI runtime name`},
		{"containerd address", func(p *Policy) { p.Containerd.Address = "run/c.sock" }, `policy: containerd.address: must be an absolute path to containerd's socket, got "run/c.sock"`},
		{"containerd namespace", func(p *Policy) { p.Containerd.Namespace = "a b" }, `policy: containerd.namespace: invalid namespace "a b"`},
		{"namespace", func(p *Policy) { p.Kubernetes.Namespace = "Team_A" }, `policy: kubernetes.namespace: invalid namespace "Team_A"`},
		{"kubeconfig relative", func(p *Policy) { p.Kubernetes.Kubeconfig = "kube/config" }, `policy: kubernetes.kubeconfig: must be an absolute path, got "kube/config"`},
		{"kubernetes mount_mb", func(p *Policy) { p.Backend = BackendKubernetes; p.Kubernetes.MountMB = 0 }, `policy: kubernetes.mount_mb: must be > 0`},
		{"language name", func(p *Policy) { p.Languages["Python"] = Language{Image: "python"} }, `policy: languages.Python: invalid language name "Python"`},
		{"language name long", func(p *Policy) { p.Languages[strings.Repeat("a", 33)] = Language{Image: "python"} }, `invalid language name`},
		{"image empty", func(p *Policy) { p.Languages["python"] = Language{} }, `policy: languages.python.image: must be set`},
		{"image space", func(p *Policy) { p.Languages["python"] = Language{Image: "python 3"} }, `policy: languages.python.image: invalid image reference "python 3"`},
		{"image semicolon", func(p *Policy) { p.Languages["python"] = Language{Image: "python;rm"} }, `languages.python.image: invalid image reference`},
		{"image upper", func(p *Policy) { p.Languages["python"] = Language{Image: "Python:3"} }, `languages.python.image: invalid image reference`},
		{"image empty tag", func(p *Policy) { p.Languages["python"] = Language{Image: "python:"} }, `languages.python.image: invalid image reference`},
		{"image double slash", func(p *Policy) { p.Languages["python"] = Language{Image: "a//b"} }, `languages.python.image: invalid image reference`},
		{"image option", func(p *Policy) { p.Languages["python"] = Language{Image: "--privileged"} }, `languages.python.image: invalid image reference`},
		{"image too long", func(p *Policy) { p.Languages["python"] = Language{Image: strings.Repeat("a", 256)} }, `languages.python.image: invalid image reference`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := Default()
			tt.mutate(p)
			err := p.Validate()
			if err == nil {
				t.Fatal("no error")
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %q does not contain %q", err, tt.want)
			}
		})
	}
}

func TestValidateJoinsAll(t *testing.T) {
	p := Default()
	p.Network = "host"
	p.Jobs.MaxConcurrent = 0
	p.Limits.Pids.Max = 1
	err := p.Validate()
	if err == nil {
		t.Fatal("no error")
	}
	lines := strings.Split(err.Error(), "\n")
	if len(lines) != 3 {
		t.Fatalf("want 3 problems, got %q", lines)
	}
	for _, l := range lines {
		if !strings.HasPrefix(l, "policy: ") {
			t.Errorf("line %q lacks the prefix", l)
		}
	}
}

func TestValidImages(t *testing.T) {
	for _, img := range []string{
		"python",
		"python:3.12-slim",
		"library/python:3.12",
		"ghcr.io/owner/repo/img:v1.2.3",
		"localhost:5000/foo",
		"sandboxer-python:latest",
		"a_b__c.d-e---f",
		"python@sha256:" + strings.Repeat("ab", 32),
		"python:3.12@sha256:" + strings.Repeat("0f", 32),
	} {
		p := Default()
		p.Languages["python"] = Language{Image: img}
		if err := p.Validate(); err != nil {
			t.Errorf("%s: %v", img, err)
		}
	}
	for _, name := range []string{"c", "c++", "node_js", "objective-c", "a" + strings.Repeat("b", 31)} {
		p := Default()
		p.Languages[name] = Language{Image: "img"}
		if err := p.Validate(); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestLoadBadValuesNameKey(t *testing.T) {
	tests := []struct {
		content, want string
	}{
		{"limits:\n  memory_mb:\n    max: 100\n", "policy: limits.memory_mb.max: must be >= limits.memory_mb.default (512), got 100"},
		{"limits:\n  cpus:\n    max: .nan\n", "policy: limits.cpus.max: must be a finite number"},
		{"limits:\n  cpus:\n    default: 0.5\n    max: 1\n", ""},
		{"network: host\n", "policy: network: must be"},
		{"jobs:\n  max_concurrent: -3\n", "policy: jobs.max_concurrent: must be > 0, got -3"},
		{"languages:\n  python:\n    image: \"bad image\"\n", "policy: languages.python.image: invalid image reference"},
		{"languages:\n  python:\n", "policy: languages.python.image: must be set"},
	}
	for _, tt := range tests {
		p, err := Load(writeFile(t, tt.content))
		if err != nil {
			t.Fatalf("%q: load: %v", tt.content, err)
		}
		err = p.Validate()
		if tt.want == "" {
			if err != nil {
				t.Errorf("%q: %v", tt.content, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%q: error %v does not contain %q", tt.content, err, tt.want)
		}
	}
}

func env(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func TestApplyEnv(t *testing.T) {
	tests := []struct {
		name  string
		env   map[string]string
		check func(p *Policy) bool
	}{
		{"none", nil, func(p *Policy) bool { return reflect.DeepEqual(p, Default()) }},
		{"empty values", map[string]string{EnvMaxJobs: "", EnvJobTimeout: "  "}, func(p *Policy) bool { return reflect.DeepEqual(p, Default()) }},
		{"max jobs", map[string]string{EnvMaxJobs: "12"}, func(p *Policy) bool { return p.Jobs.MaxConcurrent == 12 }},
		{"output plain", map[string]string{EnvMaxOutputBytes: "1048576"}, func(p *Policy) bool { return p.Output.MaxBytesPerJob == 1<<20 }},
		{"output k", map[string]string{EnvMaxOutputBytes: "64k"}, func(p *Policy) bool { return p.Output.MaxBytesPerJob == 64<<10 }},
		{"output K", map[string]string{EnvMaxOutputBytes: "64K"}, func(p *Policy) bool { return p.Output.MaxBytesPerJob == 64<<10 }},
		{"output M", map[string]string{EnvMaxOutputBytes: "32M"}, func(p *Policy) bool { return p.Output.MaxBytesPerJob == 32<<20 }},
		{"output MiB", map[string]string{EnvMaxOutputBytes: "32MiB"}, func(p *Policy) bool { return p.Output.MaxBytesPerJob == 32<<20 }},
		{"output G", map[string]string{EnvMaxOutputBytes: "1G"}, func(p *Policy) bool { return p.Output.MaxBytesPerJob == 1<<30 }},
		{"timeout seconds", map[string]string{EnvJobTimeout: "45"}, func(p *Policy) bool { return p.Limits.TimeoutS.Default == 45 }},
		{"timeout duration", map[string]string{EnvJobTimeout: "2m"}, func(p *Policy) bool { return p.Limits.TimeoutS.Default == 120 }},
		{"timeout at max", map[string]string{EnvJobTimeout: "1h"}, func(p *Policy) bool { return p.Limits.TimeoutS.Default == 3600 }},
		{"cleanup", map[string]string{EnvCleanupInterval: "5m"}, func(p *Policy) bool { return p.Jobs.CleanupIntervalS == 300 }},
		{"cleanup seconds", map[string]string{EnvCleanupInterval: "10"}, func(p *Policy) bool { return p.Jobs.CleanupIntervalS == 10 }},
		{"all", map[string]string{EnvMaxJobs: "1", EnvMaxOutputBytes: "16384", EnvJobTimeout: "1m30s", EnvCleanupInterval: "1s"}, func(p *Policy) bool {
			return p.Jobs.MaxConcurrent == 1 && p.Output.MaxBytesPerJob == 16384 && p.Limits.TimeoutS.Default == 90 && p.Jobs.CleanupIntervalS == 1
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := Default()
			if err := p.ApplyEnv(env(tt.env)); err != nil {
				t.Fatal(err)
			}
			if !tt.check(p) {
				t.Fatalf("unexpected policy %+v", p)
			}
			if err := p.Validate(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestApplyEnvErrors(t *testing.T) {
	tests := []struct {
		name, key, val, want string
	}{
		{"jobs word", EnvMaxJobs, "four", `policy: SANDBOXER_MAX_JOBS="four": must be a whole number`},
		{"jobs zero", EnvMaxJobs, "0", `policy: SANDBOXER_MAX_JOBS="0": must be between 1 and 1024`},
		{"jobs negative", EnvMaxJobs, "-2", `SANDBOXER_MAX_JOBS="-2"`},
		{"jobs fraction", EnvMaxJobs, "2.5", `SANDBOXER_MAX_JOBS="2.5"`},
		{"output word", EnvMaxOutputBytes, "lots", `policy: SANDBOXER_MAX_OUTPUT_BYTES="lots": must be a whole number of bytes`},
		{"output MB", EnvMaxOutputBytes, "16MB", `SANDBOXER_MAX_OUTPUT_BYTES="16MB"`},
		{"output T", EnvMaxOutputBytes, "1T", `SANDBOXER_MAX_OUTPUT_BYTES="1T"`},
		{"output zero", EnvMaxOutputBytes, "0", `SANDBOXER_MAX_OUTPUT_BYTES="0": must be between 1`},
		{"output negative", EnvMaxOutputBytes, "-1", `SANDBOXER_MAX_OUTPUT_BYTES="-1"`},
		{"output overflow", EnvMaxOutputBytes, "99999999999G", `SANDBOXER_MAX_OUTPUT_BYTES="99999999999G": number out of range`},
		{"output below inline", EnvMaxOutputBytes, "1k", `SANDBOXER_MAX_OUTPUT_BYTES="1k": 1024 bytes is below output.inline_bytes (16384)`},
		{"timeout word", EnvJobTimeout, "soon", `policy: SANDBOXER_JOB_TIMEOUT="soon": must be whole seconds`},
		{"timeout zero", EnvJobTimeout, "0", `SANDBOXER_JOB_TIMEOUT="0": must be > 0`},
		{"timeout negative", EnvJobTimeout, "-5s", `SANDBOXER_JOB_TIMEOUT="-5s": must be > 0`},
		{"timeout fraction", EnvJobTimeout, "1.5s", `SANDBOXER_JOB_TIMEOUT="1.5s": must be a whole number of seconds`},
		{"timeout over max", EnvJobTimeout, "2h", `policy: SANDBOXER_JOB_TIMEOUT="2h": 7200s is over limits.timeout_s.max (3600)`},
		{"cleanup word", EnvCleanupInterval, "often", `policy: SANDBOXER_CLEANUP_INTERVAL="often"`},
		{"cleanup zero", EnvCleanupInterval, "0s", `SANDBOXER_CLEANUP_INTERVAL="0s": must be > 0`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := Default()
			err := p.ApplyEnv(env(map[string]string{tt.key: tt.val}))
			if err == nil {
				t.Fatal("no error")
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %q does not contain %q", err, tt.want)
			}
			if !reflect.DeepEqual(p, Default()) {
				t.Fatalf("a bad value changed the policy: %+v", p)
			}
		})
	}
}

func TestApplyEnvJoinsAndAppliesGood(t *testing.T) {
	p := Default()
	err := p.ApplyEnv(env(map[string]string{EnvMaxJobs: "x", EnvJobTimeout: "y", EnvCleanupInterval: "2m"}))
	if err == nil || strings.Count(err.Error(), "\n") != 1 {
		t.Fatalf("want two problems, got %v", err)
	}
	if p.Jobs.CleanupIntervalS != 120 {
		t.Fatalf("good value not applied: %d", p.Jobs.CleanupIntervalS)
	}
}

func TestApplyEnvAfterLoad(t *testing.T) {
	// The timeout ceiling is the file's, not the built-in one.
	p, err := Load(writeFile(t, "limits:\n  timeout_s:\n    max: 7200\n"))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.ApplyEnv(env(map[string]string{EnvJobTimeout: "2h"})); err != nil {
		t.Fatal(err)
	}
	if p.Limits.TimeoutS.Default != 7200 {
		t.Fatalf("timeout default = %d", p.Limits.TimeoutS.Default)
	}
}

func f64(v float64) *float64 { return &v }
func i64(v int64) *int64     { return &v }

func TestResolveDefaults(t *testing.T) {
	r, err := Default().Resolve(Request{})
	if err != nil {
		t.Fatal(err)
	}
	want := Resolved{
		Timeout:       30 * time.Second,
		MemoryBytes:   512 << 20,
		NanoCPUs:      1e9,
		Pids:          256,
		OpenFiles:     1024,
		FileSizeBytes: 1024 << 20,
		TmpBytes:      256 << 20,
		WorkdirBytes:  256 << 20,
	}
	if r != want {
		t.Fatalf("got %+v\nwant %+v", r, want)
	}
}

func TestResolveGiven(t *testing.T) {
	r, err := Default().Resolve(Request{TimeoutS: f64(0.5), MemoryMB: i64(4096), CPUs: f64(0.25), Pids: i64(16)})
	if err != nil {
		t.Fatal(err)
	}
	if r.Timeout != 500*time.Millisecond || r.MemoryBytes != 4096<<20 || r.NanoCPUs != 25e7 || r.Pids != 16 {
		t.Fatalf("got %+v", r)
	}
	r, err = Default().Resolve(Request{TimeoutS: f64(3600), CPUs: f64(2), MemoryMB: i64(16), Pids: i64(1024)})
	if err != nil {
		t.Fatal(err)
	}
	if r.Timeout != time.Hour || r.NanoCPUs != 2e9 || r.MemoryBytes != 16<<20 || r.Pids != 1024 {
		t.Fatalf("got %+v", r)
	}
	r, err = Default().Resolve(Request{TimeoutS: f64(0.1), CPUs: f64(0.01)})
	if err != nil {
		t.Fatal(err)
	}
	if r.Timeout != 100*time.Millisecond || r.NanoCPUs != 1e7 {
		t.Fatalf("got %+v", r)
	}
}

func TestResolveErrors(t *testing.T) {
	tests := []struct {
		name  string
		req   Request
		field string
		want  string
	}{
		{"memory over", Request{MemoryMB: i64(99999999)}, "memory_mb", "memory_mb 99999999 is over the policy ceiling of 4096 (limits.memory_mb.max)"},
		{"memory just over", Request{MemoryMB: i64(4097)}, "memory_mb", "memory_mb 4097 is over the policy ceiling of 4096 (limits.memory_mb.max)"},
		{"memory -1", Request{MemoryMB: i64(-1)}, "memory_mb", "memory_mb must be > 0, got -1"},
		{"memory 0", Request{MemoryMB: i64(0)}, "memory_mb", "memory_mb must be > 0, got 0"},
		{"memory small", Request{MemoryMB: i64(8)}, "memory_mb", "memory_mb must be at least 16, got 8"},
		{"memory 1e12", Request{MemoryMB: i64(1e12)}, "memory_mb", "memory_mb 1000000000000 is over the policy ceiling of 4096"},
		{"timeout -1", Request{TimeoutS: f64(-1)}, "timeout_s", "timeout_s must be > 0, got -1"},
		{"timeout 0", Request{TimeoutS: f64(0)}, "timeout_s", "timeout_s must be > 0, got 0"},
		{"timeout tiny", Request{TimeoutS: f64(0.05)}, "timeout_s", "timeout_s must be at least 0.1, got 0.05"},
		{"timeout NaN", Request{TimeoutS: f64(math.NaN())}, "timeout_s", "timeout_s must be a finite number, got NaN"},
		{"timeout Inf", Request{TimeoutS: f64(math.Inf(1))}, "timeout_s", "timeout_s must be a finite number, got +Inf"},
		{"timeout -Inf", Request{TimeoutS: f64(math.Inf(-1))}, "timeout_s", "timeout_s must be a finite number"},
		{"timeout 1e12", Request{TimeoutS: f64(1e12)}, "timeout_s", "timeout_s 1e+12 is over the policy ceiling of 3600 (limits.timeout_s.max)"},
		{"timeout 3600.5", Request{TimeoutS: f64(3600.5)}, "timeout_s", "timeout_s 3600.5 is over the policy ceiling of 3600"},
		{"cpus over", Request{CPUs: f64(2.5)}, "cpus", "cpus 2.5 is over the policy ceiling of 2 (limits.cpus.max)"},
		{"cpus 0", Request{CPUs: f64(0)}, "cpus", "cpus must be > 0, got 0"},
		{"cpus -1", Request{CPUs: f64(-1)}, "cpus", "cpus must be > 0, got -1"},
		{"cpus NaN", Request{CPUs: f64(math.NaN())}, "cpus", "cpus must be a finite number"},
		{"cpus 1e12", Request{CPUs: f64(1e12)}, "cpus", "cpus 1e+12 is over the policy ceiling of 2"},
		{"cpus tiny", Request{CPUs: f64(0.001)}, "cpus", "cpus must be at least 0.01, got 0.001"},
		{"pids over", Request{Pids: i64(1025)}, "pids", "pids 1025 is over the policy ceiling of 1024 (limits.pids.max)"},
		{"pids 0", Request{Pids: i64(0)}, "pids", "pids must be > 0, got 0"},
		{"pids -1", Request{Pids: i64(-1)}, "pids", "pids must be > 0, got -1"},
		{"pids 1e12", Request{Pids: i64(1e12)}, "pids", "pids 1000000000000 is over the policy ceiling of 1024"},
		{"pids small", Request{Pids: i64(4)}, "pids", "pids must be at least 16, got 4"},
		{"first wins", Request{TimeoutS: f64(-1), Pids: i64(-1)}, "timeout_s", "timeout_s must be > 0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := Default().Resolve(tt.req)
			var le *LimitError
			if !errors.As(err, &le) {
				t.Fatalf("err = %v (%T), want *LimitError", err, err)
			}
			if le.Field != tt.field {
				t.Errorf("field = %q, want %q", le.Field, tt.field)
			}
			if !strings.Contains(le.Message, tt.want) || le.Error() != le.Message {
				t.Errorf("message %q does not contain %q", le.Message, tt.want)
			}
			if r != (Resolved{}) {
				t.Errorf("resolved not zero on error: %+v", r)
			}
		})
	}
}

func TestResolveStrictCeilings(t *testing.T) {
	p, err := Load("../../policies/strict.yaml")
	if err != nil {
		t.Fatal(err)
	}
	_, err = p.Resolve(Request{MemoryMB: i64(2048)})
	var le *LimitError
	if !errors.As(err, &le) || !strings.Contains(le.Message, "ceiling of 1024 (limits.memory_mb.max)") {
		t.Fatalf("err = %v", err)
	}
}

func TestResolveWait(t *testing.T) {
	p := Default()
	if d, err := p.ResolveWait(nil); err != nil || d != 30*time.Second {
		t.Fatalf("nil: %v %v", d, err)
	}
	if d, err := p.ResolveWait(f64(0)); err != nil || d != 0 {
		t.Fatalf("0: %v %v", d, err)
	}
	if d, err := p.ResolveWait(f64(2.5)); err != nil || d != 2500*time.Millisecond {
		t.Fatalf("2.5: %v %v", d, err)
	}
	if d, err := p.ResolveWait(f64(50)); err != nil || d != 50*time.Second {
		t.Fatalf("50: %v %v", d, err)
	}
	for _, v := range []float64{-1, 51, 301, math.NaN(), math.Inf(1), math.Inf(-1), 1e12} {
		_, err := p.ResolveWait(f64(v))
		var le *LimitError
		if !errors.As(err, &le) || le.Field != "wait_s" {
			t.Errorf("%v: err = %v", v, err)
		}
	}
	_, err := p.ResolveWait(f64(75))
	if err == nil || !strings.Contains(err.Error(), "wait_s 75 is over the policy ceiling of 50 (jobs.max_wait_s)") {
		t.Fatalf("err = %v", err)
	}
}

func TestJobsDurations(t *testing.T) {
	j := Default().Jobs
	if j.Retention() != 24*time.Hour || j.CleanupInterval() != time.Minute || j.DefaultWait() != 30*time.Second || j.MaxWait() != 50*time.Second {
		t.Fatalf("durations: %v %v %v %v", j.Retention(), j.CleanupInterval(), j.DefaultWait(), j.MaxWait())
	}
}

func TestSessionIdleTimeout(t *testing.T) {
	p := Default()
	if d, err := p.ResolveIdle(nil); err != nil || d != 600*time.Second {
		t.Fatalf("default idle = %v, %v; want 600s", d, err)
	}
	two := 2.0
	if d, err := p.ResolveIdle(&two); err != nil || d != 2*time.Second {
		t.Fatalf("idle 2 = %v, %v", d, err)
	}
	for _, v := range []float64{0, -1, 0.5, 3601} {
		if _, err := p.ResolveIdle(&v); err == nil {
			t.Errorf("idle_timeout_s %v accepted", v)
		}
	}
	over := 99999.0
	_, err := p.ResolveIdle(&over)
	if err == nil || !strings.Contains(err.Error(), "sessions.idle_timeout_s.max") {
		t.Errorf("over ceiling: %v", err)
	}

	bad := Default()
	bad.Sessions.IdleTimeoutS = Range{Default: 900, Max: 600}
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "sessions.idle_timeout_s.max") {
		t.Errorf("max < default: %v", err)
	}
	bad.Sessions.IdleTimeoutS = Range{Default: 0, Max: 10 * 86400}
	err = bad.Validate()
	if err == nil || !strings.Contains(err.Error(), "sessions.idle_timeout_s.default") || !strings.Contains(err.Error(), "sessions.idle_timeout_s.max") {
		t.Errorf("out of range: %v", err)
	}

	p, err = parse([]byte("sessions:\n  idle_timeout_s:\n    default: 30\n"))
	if err != nil || p.Sessions.IdleTimeoutS != (Range{Default: 30, Max: 3600}) {
		t.Errorf("partial file: %+v, %v", p.Sessions, err)
	}
	if _, err := parse([]byte("sessions:\n  idle: 5\n")); err == nil || !strings.Contains(err.Error(), "sessions.idle") {
		t.Errorf("unknown key: %v", err)
	}
}

func TestBlockKeys(t *testing.T) {
	p := writeFile(t, "block:\n  commands: [rm, curl]\n  agent_edits: true\n")
	got, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got.Block.Commands, []string{"rm", "curl"}) || !got.Block.AgentEdits {
		t.Fatalf("block = %+v", got.Block)
	}
	for yml, want := range map[string]string{
		"block:\n  commands: rm\n":         "block.commands: must be a list",
		"block:\n  commands: [/bin/rm]\n":  "block.commands[0]",
		"block:\n  commands: [rm, rm]\n":   "listed twice",
		"block:\n  agent_edits: \"yes\"\n": "block.agent_edits: must be true or false",
		"block:\n  commands: [[rm]]\n":     "block.commands[0]: must be a single value",
	} {
		p, err := Load(writeFile(t, yml))
		if err == nil {
			err = p.Validate()
		}
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: err = %v; want it to contain %q", yml, err, want)
		}
	}
	d := Default()
	if err := d.ApplyEnv(func(k string) string {
		if k == EnvAllowBlockEdits {
			return "true"
		}
		return ""
	}); err != nil || !d.Block.AgentEdits {
		t.Fatalf("%s=true: %v, %+v", EnvAllowBlockEdits, err, d.Block)
	}
	if err := Default().ApplyEnv(func(k string) string {
		if k == EnvAllowBlockEdits {
			return "maybe"
		}
		return ""
	}); err == nil {
		t.Fatal("bad env value accepted")
	}
}

func TestRunscPidsFloor(t *testing.T) {
	p := Default()
	p.Runtime = RuntimeRunsc
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	small := int64(32)
	if _, err := p.Resolve(Request{Pids: &small}); err == nil || !strings.Contains(err.Error(), "runsc") {
		t.Fatalf("pids 32 under runsc: %v", err)
	}
	ok := int64(64)
	if _, err := p.Resolve(Request{Pids: &ok}); err != nil {
		t.Fatal(err)
	}
	p.Limits.Pids.Default = 32
	if err := p.Validate(); err == nil || !strings.Contains(err.Error(), "limits.pids.default") {
		t.Fatalf("default 32 under runsc: %v", err)
	}
}

// TestMountsValidate: a grant is refused, naming mounts[i].name or
// mounts[i].source, for a bad name, a duplicate, a relative, missing or
// non-directory source, /, and a source holding the engine's socket.
func TestMountsValidate(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "f")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	// Links to the host's places, and a parent that is one (THREATS 106).
	linkToRun, linkParent := filepath.Join(dir, "run-link"), filepath.Join(dir, "root-link")
	if err := os.Symlink("/run", linkToRun); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/", linkParent); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		mounts []Mount
		want   string
	}{
		{[]Mount{{"project", dir}}, ""},
		{[]Mount{{"Project", dir}}, "mounts[0].name"},
		{[]Mount{{"p", dir}, {"p", dir}}, "mounts[1].name: \"p\" is granted twice"},
		{[]Mount{{"p", "relative/dir"}}, "mounts[0].source"},
		{[]Mount{{"p", dir + "/missing"}}, "mounts[0].source"},
		{[]Mount{{"p", file}}, "is not a directory"},
		{[]Mount{{"p", "/"}}, `mounts[0].source: "/" is the host's root`},
		{[]Mount{{"p", "/var/run"}}, `"/var/run" (it resolves to /run) is /run`},
		{[]Mount{{"p", "/etc/ssl"}}, "lies inside /etc"},
		{[]Mount{{"p", "/var/lib"}}, "holds /var/lib/docker"},
		{[]Mount{{"p", "/proc/self"}}, "lies inside /proc"},
		{[]Mount{{"p", linkToRun}}, "(it resolves to /run) is /run"},
		{[]Mount{{"p", linkParent + "/etc"}}, "(it resolves to /etc) is /etc"},
		{[]Mount{{"p", dir + "/../" + filepath.Base(dir)}}, "clean absolute path"},
	}
	for _, c := range cases {
		p := Default()
		p.Mounts = c.mounts
		err := p.Validate()
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%v: %v", c.mounts, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%v: %v, want an error with %q", c.mounts, err, c.want)
		}
	}
}

// On backend kubernetes egress.allow is the list of jobs on network egress
// and of workspaces made with egress (through their tunnels), and the
// installs' list with workspaces.install_network: egress.
func TestKubernetesEgress(t *testing.T) {
	p := Default()
	p.Backend = BackendKubernetes
	p.Egress.Allow = []string{"registry.npmjs.org:443"}
	if err := p.Validate(); err != nil {
		t.Fatalf("egress.allow on kubernetes: %v", err)
	}
	p.Workspaces.InstallNetwork = NetworkEgress
	p.Network = NetworkEgress
	if err := p.Validate(); err != nil {
		t.Fatalf("network egress on kubernetes: %v", err)
	}
}

func TestSecretsValidate(t *testing.T) {
	p, err := Load(writeFile(t, `
egress:
  allow: ["api.example.com", "*.git.example.com:443"]
secrets:
  API_KEY: {env: API_KEY_VALUE, hosts: [api.example.com]}
  GIT_TOKEN: {value_file: /etc/sandboxer/git-token, hosts: ["code.git.example.com:443"], tenants: [alice]}
`))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Validate(); err != nil {
		t.Fatalf("good secrets refused: %v", err)
	}
	if !p.Secrets["API_KEY"].MayUse("bob") || p.Secrets["GIT_TOKEN"].MayUse("bob") || !p.Secrets["GIT_TOKEN"].MayUse("alice") {
		t.Fatal("tenants not applied")
	}
	if got := p.SecretNames(); len(got) != 2 || got[0] != "API_KEY" {
		t.Fatalf("names %v", got)
	}

	for _, c := range []struct {
		yaml, want string
	}{
		{`{A: {env: X, hosts: [evil.example.org]}}`, `secrets.A.hosts: "evil.example.org" is not within`},
		{`{A: {env: X, value_file: /x, hosts: [api.example.com]}}`, "secrets.A: set exactly one of value_file and env"},
		{`{A: {hosts: [api.example.com]}}`, "secrets.A: set exactly one of value_file and env"},
		{`{A: {value_file: rel/path, hosts: [api.example.com]}}`, "secrets.A.value_file: must be an absolute path"},
		{`{A: {env: X}}`, "secrets.A.hosts: must name at least one host"},
		{`{"9A": {env: X, hosts: [api.example.com]}}`, "secrets.9A: invalid secret name"},
		{`{HTTPS_PROXY: {env: X, hosts: [api.example.com]}}`, "secrets.HTTPS_PROXY: HTTPS_PROXY is a variable the server sets"},
		{`{A: {env: X, hosts: [api.example.com], tenants: [""]}}`, "secrets.A.tenants[0]: must be a token name"},
	} {
		p, err := Load(writeFile(t, "egress:\n  allow: [api.example.com]\nsecrets: "+c.yaml+"\n"))
		if err != nil {
			t.Fatalf("%s: %v", c.yaml, err)
		}
		if err := p.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want %q", c.yaml, err, c.want)
		}
	}
	p, _ = Load(writeFile(t, "secrets: {A: {env: X, hosts: [api.example.com]}}\n"))
	if err := p.Validate(); err == nil || !strings.Contains(err.Error(), "secrets.A.hosts: egress.allow is empty") {
		t.Errorf("no allowlist: %v", err)
	}
}

// Templates: names a language's grammar but no built-in's; clean absolute
// paths; network bridge only when allowed, egress only with an allowlist;
// caps within their ranges. (What a backend allows is internal/backend's.)
func TestValidateTemplates(t *testing.T) {
	ok := Template{Context: "/srv/t"}
	tests := []struct {
		name   string
		mutate func(p *Policy)
		want   string
	}{
		{"builtin name", func(p *Policy) { p.Templates["python"] = ok }, `templates.python: "python" is a built-in language`},
		{"bad name", func(p *Policy) { p.Templates["Bad Name"] = ok }, `invalid template name "Bad Name"`},
		{"relative context", func(p *Policy) { p.Templates["t"] = Template{Context: "srv/t"} }, "templates.t.context: must be a clean absolute directory"},
		{"unclean dockerfile", func(p *Policy) { p.Templates["t"] = Template{Context: "/srv/t", Dockerfile: "/srv/../t/Dockerfile"} }, "templates.t.dockerfile: must be a clean absolute path"},
		{"unknown language", func(p *Policy) { p.Templates["t"] = Template{Context: "/srv/t", Language: "cobol"} }, `templates.t.language: "cobol" is not a built-in language`},
		{"bridge", func(p *Policy) { p.Templates["t"] = Template{Context: "/srv/t", Network: "bridge"} }, "set templates_build.allow_bridge: true"},
		{"egress without hosts", func(p *Policy) { p.Templates["t"] = Template{Context: "/srv/t", Network: "egress"} }, "templates.t.network: egress needs hosts in egress.allow"},
		{"other network", func(p *Policy) { p.Templates["t"] = Template{Context: "/srv/t", Network: "host"} }, `templates.t.network: must be "none", "egress" or "bridge", got "host"`},
		{"build arg", func(p *Policy) {
			p.Templates["t"] = Template{Context: "/srv/t", BuildArgs: map[string]string{"A-B": "1"}}
		}, `"A-B" is not a build argument name`},
		{"context cap", func(p *Policy) { p.TemplateBuilds.MaxContextMB = 0 }, "templates_build.max_context_mb: must be > 0"},
		{"trusted proxy", func(p *Policy) { p.HTTP.TrustedProxies = []string{"10.0.0.0/8", "proxy.example"} }, `http.trusted_proxies[1]: "proxy.example" is not an address or a CIDR range`},
		{"disk cap", func(p *Policy) { p.TemplateBuilds.DiskMB = 1 }, "templates_build.disk_mb: must be >= 16"},
	}
	for _, tc := range tests {
		p := Default()
		tc.mutate(p)
		err := p.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want %q", tc.name, err, tc.want)
		}
	}
	p := Default()
	p.Templates["t"] = Template{Context: "/srv/t", Network: "bridge", Language: "python"}
	p.TemplateBuilds.AllowBridge = true
	if err := p.Validate(); err != nil {
		t.Errorf("bridge allowed: %v", err)
	}
}
