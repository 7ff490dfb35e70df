package e2e

import (
	"archive/zip"
	"bytes"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// pipIndex serves a PEP 503 simple index with one pure-Python wheel,
// sbxdemo 1.2.3 (module sbxdemo, answer() == 42), on the docker bridge's
// gateway address, and returns its URL.
func pipIndex(t *testing.T) string { return pipIndexHooked(t, nil) }

// pipIndexHooked is pipIndex, calling onRequest (when set) before it
// answers a request for the package's page.
func pipIndexHooked(t *testing.T, onRequest func()) string {
	t.Helper()
	var whl bytes.Buffer
	z := zip.NewWriter(&whl)
	files := map[string]string{
		"sbxdemo/__init__.py":                   "def answer():\n    return 42\n",
		"sbxdemo-1.2.3.dist-info/METADATA":      "Metadata-Version: 2.1\nName: sbxdemo\nVersion: 1.2.3\n",
		"sbxdemo-1.2.3.dist-info/WHEEL":         "Wheel-Version: 1.0\nGenerator: e2e\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
		"sbxdemo-1.2.3.dist-info/top_level.txt": "sbxdemo\n",
	}
	var record strings.Builder
	for _, name := range []string{"sbxdemo/__init__.py", "sbxdemo-1.2.3.dist-info/METADATA", "sbxdemo-1.2.3.dist-info/WHEEL", "sbxdemo-1.2.3.dist-info/top_level.txt"} {
		w, _ := z.Create(name)
		w.Write([]byte(files[name]))
		fmt.Fprintf(&record, "%s,,\n", name)
	}
	record.WriteString("sbxdemo-1.2.3.dist-info/RECORD,,\n")
	w, _ := z.Create("sbxdemo-1.2.3.dist-info/RECORD")
	w.Write([]byte(record.String()))
	if err := z.Close(); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "172.17.0.1:0")
	if err != nil {
		t.Skipf("no docker bridge address to serve a package index on: %v", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/simple/sbxdemo/", func(w http.ResponseWriter, r *http.Request) {
		if onRequest != nil {
			onRequest()
		}
		fmt.Fprint(w, `<!DOCTYPE html><html><body><a href="/files/sbxdemo-1.2.3-py3-none-any.whl">sbxdemo-1.2.3-py3-none-any.whl</a></body></html>`)
	})
	mux.HandleFunc("/files/sbxdemo-1.2.3-py3-none-any.whl", func(w http.ResponseWriter, r *http.Request) {
		w.Write(whl.Bytes())
	})
	srv := &http.Server{Handler: mux}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return "http://" + ln.Addr().String() + "/simple"
}

func TestWorkspaceInstallPipFromLocalIndex(t *testing.T) {
	t.Parallel()
	index := pipIndex(t)
	s := startServer(t, installPolicy(t, "  pip_index_url: "+index+"\n"))
	name := "e2e-pip"
	s.createWS(name, map[string]any{"language": "python"})
	start := time.Now()
	r := s.ok("install_packages", map[string]any{"workspace": name, "packages": []any{"sbxdemo==1.2.3"}})
	t.Logf("pip install from the local index took %v", time.Since(start))
	p := r["packages"].([]any)[0].(map[string]any)
	if r["installed"] != true || str(p, "manager") != "pip" || str(p, "version") != "1.2.3" {
		t.Fatalf("pip install: %v", r)
	}
	if out := s.wsOut(name, `cd /workspace && python3 -c "import sbxdemo; print(sbxdemo.answer())"`); out != "42\n" {
		t.Fatalf("import after install: %q", out)
	}
	r, _ = s.failedWith("install_packages", map[string]any{"workspace": name, "packages": []any{"nosuchpkg"}})
	if r["installed"] != false {
		t.Fatalf("missing pip package: %v", r)
	}
	if nets := wsNetworks(t, name); nets != "" {
		t.Fatalf("after pip installs the workspace is still on %q", nets)
	}
}
