package e2b

import (
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"path"
	"strings"

	"github.com/sandboxer/sandboxer/images"
)

// maxUpload bounds one upload request's body.
const maxUpload = 64 << 20

// workspacePath maps an E2B path to a path under the workspace: E2B's home
// (/home/user) and /workspace are the workspace's root; a relative path is
// taken from there; any other absolute path is outside what a sandbox of
// sandboxer lets files be read or written.
func workspacePath(p string) (string, error) {
	if p == "" {
		return "", errors.New("a path is required")
	}
	for _, root := range []string{images.HomeUser, "/workspace"} {
		if p == root {
			return ".", nil
		}
		if rest, ok := strings.CutPrefix(p, root+"/"); ok {
			p = rest
			break
		}
	}
	if strings.HasPrefix(p, "/") {
		return "", fmt.Errorf("%s is outside the sandbox's files: use a path under /home/user (the workspace)", p)
	}
	clean := path.Clean(p)
	if clean == ".." || strings.HasPrefix(clean, "../") {
		return "", fmt.Errorf("%s leaves the sandbox's files", p)
	}
	return clean, nil
}

// readFile is envd's GET /files: the file's bytes.
func (s *Server) readFile(w http.ResponseWriter, r *http.Request) {
	sb := sandboxOf(r.Context())
	rel, err := workspacePath(r.URL.Query().Get("path"))
	if err != nil {
		apiError(w, http.StatusBadRequest, "path: %v", err)
		return
	}
	out, err := s.tool(r.Context(), "read_file", map[string]any{"workspace": sb.ID, "path": rel})
	if err != nil {
		status := http.StatusBadRequest
		if strings.Contains(err.Error(), "no such file") {
			status = http.StatusNotFound
		}
		apiError(w, status, "%v", err)
		return
	}
	content, _ := out["content"].(string)
	data := []byte(content)
	if out["encoding"] == "base64" {
		if data, err = base64.StdEncoding.DecodeString(content); err != nil {
			apiError(w, http.StatusInternalServerError, "read %s: %v", rel, err)
			return
		}
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", fmt.Sprint(len(data)))
	_, _ = w.Write(data)
}

// entryInfo is what envd says of a file written (E2B's EntryInfo).
type entryInfo struct {
	Name string `json:"name"`
	Type string `json:"type"`
	Path string `json:"path"`
}

// writeFile is envd's POST /files: multipart files (each part's file name
// its path when the query names none), or one octet-stream body.
func (s *Server) writeFile(w http.ResponseWriter, r *http.Request) {
	sb := sandboxOf(r.Context())
	r.Body = http.MaxBytesReader(w, r.Body, maxUpload)
	query := r.URL.Query().Get("path")
	var written []entryInfo
	put := func(p string, data []byte) error {
		rel, err := workspacePath(p)
		if err != nil {
			return err
		}
		if _, err := s.tool(r.Context(), "write_file", map[string]any{"workspace": sb.ID, "path": rel,
			"content": base64.StdEncoding.EncodeToString(data), "encoding": "base64"}); err != nil {
			return err
		}
		written = append(written, entryInfo{Name: path.Base(rel), Type: "file", Path: e2bPath(rel)})
		return nil
	}
	mt, params, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if mt == "multipart/form-data" {
		mr := multipart.NewReader(r.Body, params["boundary"])
		for {
			part, err := mr.NextPart()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				apiError(w, http.StatusBadRequest, "the upload is not multipart form data: %v", err)
				return
			}
			data, err := io.ReadAll(part)
			if err != nil {
				apiError(w, http.StatusBadRequest, "the upload: %v", err)
				return
			}
			p := query
			if p == "" {
				p = part.FileName()
			}
			if err := put(p, data); err != nil {
				apiError(w, http.StatusBadRequest, "%v", err)
				return
			}
		}
	} else {
		data, err := io.ReadAll(r.Body)
		if err != nil {
			apiError(w, http.StatusBadRequest, "the upload: %v", err)
			return
		}
		if err := put(query, data); err != nil {
			apiError(w, http.StatusBadRequest, "%v", err)
			return
		}
	}
	writeJSON(w, http.StatusOK, written)
}
