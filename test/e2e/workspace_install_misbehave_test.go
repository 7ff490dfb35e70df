package e2e

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha1"
	"crypto/sha512"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
)

// THREATS 19: installs that misbehave (an install script that loops, forks
// or eats memory) are bounded by the install's timeout and the workspace's
// limits, leave the workspace usable, and the call says what happened.

// npmRegistry serves packages (name -> install script) built here, version
// 1.0.0 each, as an npm registry on the docker bridge's gateway address,
// and returns its URL.
func npmRegistry(t *testing.T, installScripts map[string]string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "172.17.0.1:0")
	if err != nil {
		t.Skipf("no docker bridge address to serve an npm registry on: %v", err)
	}
	base := "http://" + ln.Addr().String()
	tarballs := map[string][]byte{}
	packuments := map[string][]byte{}
	for name, script := range installScripts {
		manifest := map[string]any{"name": name, "version": "1.0.0", "scripts": map[string]string{"install": script}}
		pj, _ := json.Marshal(manifest)
		var tgz bytes.Buffer
		gz := gzip.NewWriter(&tgz)
		tw := tar.NewWriter(gz)
		tw.WriteHeader(&tar.Header{Name: "package/package.json", Mode: 0o644, Size: int64(len(pj)), ModTime: time.Unix(1e9, 0)})
		tw.Write(pj)
		tw.Close()
		gz.Close()
		tarballs[name] = tgz.Bytes()
		s1 := sha1.Sum(tgz.Bytes())
		s512 := sha512.Sum512(tgz.Bytes())
		manifest["hasInstallScript"] = true
		manifest["dist"] = map[string]string{
			"tarball":   base + "/" + name + "/-/" + name + "-1.0.0.tgz",
			"shasum":    hex.EncodeToString(s1[:]),
			"integrity": "sha512-" + base64.StdEncoding.EncodeToString(s512[:]),
		}
		packuments[name], _ = json.Marshal(map[string]any{"name": name, "dist-tags": map[string]string{"latest": "1.0.0"},
			"versions": map[string]any{"1.0.0": manifest}})
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := strings.Trim(r.URL.Path, "/")
		if name, file, ok := strings.Cut(p, "/-/"); ok && file == name+"-1.0.0.tgz" && tarballs[name] != nil {
			w.Write(tarballs[name])
			return
		}
		if b := packuments[p]; b != nil {
			w.Header().Set("Content-Type", "application/json")
			w.Write(b)
			return
		}
		http.NotFound(w, r)
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return base + "/"
}

func TestWorkspaceMisbehavingInstallsAreBounded(t *testing.T) {
	t.Parallel()
	registry := npmRegistry(t, map[string]string{
		"sbx-loop": "while :; do :; done",
		"sbx-fork": "i=0; while [ $i -lt 100000 ]; do sleep 600 & i=$((i+1)); done; wait",
		"sbx-mem":  `node -e "const a=[]; for (;;) a.push(Buffer.alloc(16<<20, 1))"`,
	})
	s := startServer(t, installPolicy(t, "  npm_registry_url: "+registry+"\n"))
	name := "e2e-install-misbehave"
	s.createWS(name, map[string]any{"language": "javascript", "memory_mb": 256, "pids": 128})
	// npm 12 runs a dependency's install scripts only when the project's
	// package.json allows them: this project does, as an agent may.
	s.ok("write_file", map[string]any{"workspace": name, "path": "package.json",
		"content": `{"name": "misbehave", "version": "1.0.0", "allowScripts": {"sbx-loop": true, "sbx-fork": true, "sbx-mem": true}}`})

	usable := func(after string) {
		t.Helper()
		// The workspace runs jobs, forks freely (its pids are its own) and
		// keeps no install container.
		if out := s.wsOut(name, "for i in 1 2 3 4 5 6 7 8; do sleep 0.1 & done; wait; echo usable; ls /sys/class/net"); out != "usable\nlo\n" {
			t.Fatalf("after the %s install: %q", after, out)
		}
		if nets := installContainerNetworks(t, name); nets != "" {
			t.Fatalf("after the %s install an install container is still there, on %q", after, nets)
		}
	}
	install := func(pkg string) (string, string) {
		t.Helper()
		start := time.Now()
		r, msg := s.failedWith("install_packages", map[string]any{"workspace": name, "packages": []any{pkg}, "timeout_s": 20})
		m := r["managers"].([]any)[0].(map[string]any)
		t.Logf("%s: returned after %v: %s", pkg, time.Since(start).Round(time.Second), str(m, "error"))
		if r["installed"] != false {
			t.Fatalf("%s: %v", pkg, r)
		}
		return str(m, "error"), msg
	}

	// A loop: the install's timeout ends it, with everything it started.
	if e, _ := install("sbx-loop"); !strings.Contains(e, "ran out of time") {
		t.Errorf("looping install: the error does not say it ran out of time: %q", e)
	}
	usable("looping")
	// A fork bomb: the pids limit holds it, the timeout or its failure ends it.
	if e, _ := install("sbx-fork"); e == "" {
		t.Errorf("forking install: no error")
	}
	usable("forking")
	// Memory: the workspace's memory limit holds it, and the call says so.
	if e, _ := install("sbx-mem"); !strings.Contains(e, "out of memory") {
		t.Errorf("memory-eating install: the error does not say it ran out of memory: %q", e)
	}
	usable("memory-eating")

	// Deleting the workspace while an install runs takes the install
	// container too (it holds the volume), and the install returns.
	done := make(chan *mcp.CallToolResult, 1)
	go func() {
		done <- s.call("install_packages", map[string]any{"workspace": name, "packages": []any{"sbx-loop"}, "timeout_s": 300})
	}()
	deadline := time.Now().Add(2 * time.Minute)
	for installContainerNetworks(t, name) == "" {
		if time.Now().After(deadline) {
			t.Fatal("the install container never appeared")
		}
		time.Sleep(200 * time.Millisecond)
	}
	s.ok("delete_workspace", map[string]any{"name": name})
	select {
	case r := <-done:
		if !r.IsError {
			t.Errorf("an install whose workspace was deleted: %s", text(r))
		}
	case <-time.After(4 * time.Minute):
		t.Fatal("install_packages did not return after its workspace was deleted")
	}
	if c, v := wsEngineObjects(t, name); c != 0 || v != 0 {
		t.Errorf("after the delete: %d containers, %d volumes", c, v)
	}
}
