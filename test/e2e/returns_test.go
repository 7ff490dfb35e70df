package e2e

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"image/png"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
)

// images are a result's image content items, decoded, with the text lines
// that name them.
func images(t *testing.T, res *mcp.CallToolResult) (sizes []string, lines []string) {
	t.Helper()
	for _, c := range res.Content {
		switch c := c.(type) {
		case mcp.ImageContent:
			data, err := base64.StdEncoding.DecodeString(c.Data)
			if err != nil {
				t.Fatalf("image content is not base64: %v", err)
			}
			if len(data) > 1<<20 {
				t.Errorf("an image content item is %d bytes, over 1 MiB", len(data))
			}
			cfg, err := png.DecodeConfig(bytes.NewReader(data))
			if err != nil || c.MIMEType != "image/png" {
				t.Fatalf("image content (%s) is not a PNG: %v", c.MIMEType, err)
			}
			sizes = append(sizes, fmt.Sprintf("%dx%d", cfg.Width, cfg.Height))
		case mcp.TextContent:
			if strings.HasPrefix(c.Text, "figure ") {
				lines = append(lines, c.Text)
			}
		}
	}
	return sizes, lines
}

// TestFiguresComeBackAsImages: in run_script python, a figure shown with
// plt.show(), one left open at the end and a PIL image's show() come back
// as PNG image content items of the right sizes, each named by a line; a
// figure too large is scaled down to 1,600 px a side. numpy, pandas,
// matplotlib and PIL import in the python image, and matplotlib's font
// cache is seeded before it is first imported (not built by the job).
func TestFiguresComeBackAsImages(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	res := s.call("run_script", map[string]any{"language": "python", "code": `
import os
print("seeded", any(n.startswith("fontlist") for n in os.listdir(os.environ["MPLCONFIGDIR"])))
import numpy as np, pandas as pd, matplotlib, PIL
import matplotlib.pyplot as plt
from PIL import Image
print("backend", matplotlib.get_backend())
df = pd.DataFrame({"x": np.arange(10), "y": np.arange(10) ** 2})
fig, ax = plt.subplots(figsize=(4, 3), dpi=100)
ax.plot(df.x, df.y)
plt.show()
plt.figure(figsize=(40, 20), dpi=100)   # 4000x2000: scaled down
plt.plot([1, 2, 3])
Image.new("RGB", (64, 32), "red").show()
print("done")
`})
	if res.IsError {
		t.Fatalf("run_script: %s", text(res))
	}
	st := structured(t, res)
	if st["stdout"] != "seeded True\nbackend module://sandboxer_mpl_backend\ndone\n" {
		t.Fatalf("stdout %q, stderr %q", st["stdout"], st["stderr"])
	}
	sizes, lines := images(t, res)
	// plt.show() first, then PIL's show, then the figure left open at exit.
	want := []string{"400x300", "64x32", "1600x800"}
	if strings.Join(sizes, " ") != strings.Join(want, " ") {
		t.Errorf("images %v, want %v", sizes, want)
	}
	if len(lines) != 3 || lines[0] != "figure 1: 400×300 PNG" {
		t.Errorf("figure lines: %q", lines)
	}
	// Without figures, nothing but the usual result.
	plain := s.call("run_script", map[string]any{"language": "python", "code": "print(1)"})
	if sizes, _ := images(t, plain); len(sizes) != 0 || len(plain.Content) != 1 {
		t.Errorf("a script without figures returned %d content items", len(plain.Content))
	}
}

// readResourceErr reads uri with the stdio client.
func (s *server) readResourceErr(uri string) (*mcp.ReadResourceResult, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req := mcp.ReadResourceRequest{}
	req.Params.URI = uri
	return s.client.ReadResource(ctx, req)
}

// links are a result's resource links: uri → size.
func links(res *mcp.CallToolResult) map[string]int64 {
	out := map[string]int64{}
	for _, c := range res.Content {
		if l, ok := c.(mcp.ResourceLink); ok {
			var n int64 = -1
			if l.Size != nil {
				n = *l.Size
			}
			out[l.URI+" "+l.MIMEType] = n
		}
	}
	return out
}

// TestReturnsFromAFreshSandbox: run_command with returns links the matching
// files as job://ID/files/PATH; resources/read returns their bytes (an image
// as a blob); a link, a file outside the patterns and a pattern leaving the
// directory are not returned.
func TestReturnsFromAFreshSandbox(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	res := s.call("run_command", map[string]any{
		"command": `mkdir -p out && printf 'a,b\n1,2\n' > out/data.csv && printf '<h1>hi</h1>' > report.html && ` +
			`head -c 100 /dev/urandom > out/blob.bin && echo secret > skip.txt && ln -s /etc/passwd out/passwd.csv`,
		"returns": []string{"out/*.csv", "*.html", "**/*.bin"}})
	if res.IsError {
		t.Fatalf("run_command: %s", text(res))
	}
	id := str(structured(t, res), "job_id")
	got := links(res)
	want := map[string]int64{
		"job://" + id + "/files/out/data.csv text/csv; charset=utf-8":  8,
		"job://" + id + "/files/report.html text/html; charset=utf-8":  11,
		"job://" + id + "/files/out/blob.bin application/octet-stream": 100,
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("links %v, want %v", got, want)
	}
	r, err := s.readResourceErr("job://" + id + "/files/out/data.csv")
	if err != nil || len(r.Contents) != 1 {
		t.Fatalf("read: %v %+v", err, r)
	}
	if tc, ok := r.Contents[0].(mcp.TextResourceContents); !ok || tc.Text != "a,b\n1,2\n" {
		t.Errorf("data.csv read as %+v", r.Contents[0])
	}
	r, err = s.readResourceErr("job://" + id + "/files/out/blob.bin")
	if err != nil {
		t.Fatal(err)
	}
	if b, ok := r.Contents[0].(mcp.BlobResourceContents); !ok || len(b.Blob) == 0 {
		t.Errorf("blob.bin read as %+v", r.Contents[0])
	}
	for _, uri := range []string{"job://" + id + "/files/skip.txt", "job://" + id + "/files/out/passwd.csv", "job://" + id + "/files/../etc/passwd"} {
		if _, err := s.readResourceErr(uri); err == nil || !strings.Contains(err.Error(), "no returned file") {
			t.Errorf("read %s: %v, want no returned file", uri, err)
		}
	}
	if msg := s.toolErr("run_command", map[string]any{"command": "true", "returns": []string{"../x"}}); !strings.Contains(msg, "returns[0]") {
		t.Errorf("a pattern leaving the directory: %s", msg)
	}
}

// TestReturnsFromAWorkspaceAcrossTenants: a workspace script writes
// report.html and out.csv with returns: two workspace:// links whose bytes
// resources/read returns over HTTP; another tenant's read of the same URIs
// is not found.
func TestReturnsFromAWorkspaceAcrossTenants(t *testing.T) {
	t.Parallel()
	h := startHTTPServer(t)
	alice, bob := h.client(aliceToken), h.client(bobToken)
	const ws = "e2e-returns"
	cleanupWorkspace(t, ws)
	okHTTP(t, alice, "create_workspace", map[string]any{"name": ws, "language": "python"})
	res := callHTTP(t, alice, "run_script", map[string]any{"language": "python", "workspace": ws,
		"code":    "open('report.html','w').write('<p>report</p>')\nopen('out.csv','w').write('x,y\\n1,2\\n')\n",
		"returns": []string{"report.html", "*.csv"}})
	if res.IsError {
		t.Fatalf("run_script: %s", text(res))
	}
	got := links(res)
	want := map[string]int64{
		"workspace://" + ws + "/report.html text/html; charset=utf-8": 13,
		"workspace://" + ws + "/out.csv text/csv; charset=utf-8":      8,
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("links %v, want %v", got, want)
	}
	for uri, body := range map[string]string{"workspace://" + ws + "/report.html": "<p>report</p>", "workspace://" + ws + "/out.csv": "x,y\n1,2\n"} {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		req := mcp.ReadResourceRequest{}
		req.Params.URI = uri
		r, err := alice.ReadResource(ctx, req)
		if err != nil || len(r.Contents) != 1 {
			t.Fatalf("alice's read of %s: %v %+v", uri, err, r)
		}
		if tc, ok := r.Contents[0].(mcp.TextResourceContents); !ok || tc.Text != body {
			t.Errorf("alice's read of %s: %+v, want %q", uri, r.Contents[0], body)
		}
		_, err = bob.ReadResource(ctx, req)
		cancel()
		// Not found (-32002, or -32602 "invalid params" in the 2026-07-28
		// revision this client speaks), never -32603: bob has no such workspace.
		if err == nil || !strings.Contains(err.Error(), "no such workspace") || strings.Contains(err.Error(), "internal error") {
			t.Errorf("bob's read of alice's %s: %v, want not found", uri, err)
		}
	}
}

// TestREPLCellFigures: in a python session, a cell that calls plt.show()
// and a cell that leaves a figure open each give an image (the open one when
// the next prompt comes), once, with send_input's or a later read's result.
func TestREPLCellFigures(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	id := str(s.startSession(map[string]any{"language": "python", "command": "python3", "until": ">>> $"}), "job_id")
	var sizes []string
	collect := func(res *mcp.CallToolResult) {
		if res.IsError {
			t.Fatalf("session call: %s", text(res))
		}
		got, _ := images(t, res)
		sizes = append(sizes, got...)
	}
	for _, cell := range []string{
		"import matplotlib.pyplot as plt; f = plt.figure(figsize=(3, 2), dpi=100); p = plt.plot([1, 2, 3]); plt.show()",
		"f = plt.figure(figsize=(2, 2), dpi=100); p = plt.plot([3, 1])",
		"print('next')",
	} {
		collect(s.call("send_input", map[string]any{"job_id": id, "text": cell, "enter": true, "until": ">>> $"}))
	}
	// A figure is sent once written: it may come just after the prompt.
	for deadline := time.Now().Add(30 * time.Second); len(sizes) < 2 && time.Now().Before(deadline); {
		collect(s.call("read_output", map[string]any{"job_id": id, "wait_s": 1}))
	}
	if strings.Join(sizes, " ") != "300x200 200x200" {
		t.Errorf("figures of the cells: %v, want 300x200 then 200x200, each once", sizes)
	}
	collect(s.call("read_output", map[string]any{"job_id": id, "wait_s": 1}))
	if len(sizes) != 2 {
		t.Errorf("a figure came twice: %v", sizes)
	}
}
