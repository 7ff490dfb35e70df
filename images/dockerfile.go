package images

import (
	"archive/tar"
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
)

// FromImages returns the images a Dockerfile's FROM lines name, with ARGs
// declared before the first FROM (defaults overridden by buildArgs) expanded,
// leaving out "scratch" and earlier build stages.
func FromImages(dockerfile string, buildArgs map[string]string) ([]string, error) {
	metaArgs := map[string]string{}
	stages := map[string]bool{}
	var refs []string
	seenFrom := false
	for _, line := range Instructions(dockerfile) {
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		switch strings.ToUpper(fields[0]) {
		case "ARG":
			if seenFrom {
				continue
			}
			for _, decl := range fields[1:] {
				name, def, hasDef := strings.Cut(decl, "=")
				if v, ok := buildArgs[name]; ok {
					metaArgs[name] = v
				} else if hasDef {
					metaArgs[name] = strings.Trim(def, `"'`)
				} else {
					metaArgs[name] = ""
				}
			}
		case "FROM":
			seenFrom = true
			rest := fields[1:]
			for len(rest) > 0 && strings.HasPrefix(rest[0], "--") { // --platform=...
				rest = rest[1:]
			}
			if len(rest) == 0 {
				return nil, fmt.Errorf("FROM without an image: %q", line)
			}
			ref := os.Expand(rest[0], func(v string) string {
				name, def, hasDef := strings.Cut(v, ":-")
				if val := metaArgs[name]; val != "" || !hasDef {
					return val
				}
				return def
			})
			if ref == "" {
				return nil, fmt.Errorf("%q names no image (missing build argument?)", line)
			}
			local := strings.EqualFold(ref, "scratch") || stages[strings.ToLower(ref)]
			if len(rest) >= 3 && strings.EqualFold(rest[1], "AS") {
				stages[strings.ToLower(rest[2])] = true
			}
			if !local && !slices.Contains(refs, ref) {
				refs = append(refs, ref)
			}
		}
	}
	if !seenFrom {
		return nil, errors.New("no FROM instruction")
	}
	return refs, nil
}

// Instructions joins continuation lines and drops comments and blank
// lines (good enough for ARG and FROM; the engine parses the real thing).
func Instructions(dockerfile string) []string {
	var out []string
	var cur strings.Builder
	sc := bufio.NewScanner(strings.NewReader(dockerfile))
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(line, "#") || (line == "" && cur.Len() == 0) {
			continue
		}
		if cont, ok := strings.CutSuffix(line, `\`); ok {
			cur.WriteString(cont)
			cur.WriteByte(' ')
			continue
		}
		cur.WriteString(line)
		out = append(out, cur.String())
		cur.Reset()
	}
	if cur.Len() > 0 {
		out = append(out, cur.String())
	}
	return out
}

// DockerfileFromTar returns the Dockerfile at the root of a build context tar.
func DockerfileFromTar(contextTar []byte) (string, error) {
	tr := tar.NewReader(bytes.NewReader(contextTar))
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return "", errors.New("build context has no Dockerfile")
		}
		if err != nil {
			return "", fmt.Errorf("build context: %w", err)
		}
		if strings.TrimPrefix(hdr.Name, "./") == "Dockerfile" && hdr.Typeflag == tar.TypeReg {
			data, err := io.ReadAll(tr)
			if err != nil {
				return "", fmt.Errorf("build context: %w", err)
			}
			return string(data), nil
		}
	}
}

// CheckParents reads a build context's Dockerfile and checks that every
// image its FROM lines name is present (present says, or fails on the
// engine): images are never pulled. It returns the Dockerfile.
func CheckParents(contextTar []byte, buildArgs map[string]string, present func(ref string) (bool, error)) (string, error) {
	dockerfile, err := DockerfileFromTar(contextTar)
	if err != nil {
		return "", err
	}
	parents, err := FromImages(dockerfile, buildArgs)
	if err != nil {
		return "", fmt.Errorf("Dockerfile: %w", err)
	}
	for _, ref := range parents {
		ok, err := present(ref)
		if err != nil {
			return "", err
		}
		if !ok {
			return "", fmt.Errorf("FROM %s: the image is not present on the engine (images are never pulled: build or load it first)", ref)
		}
	}
	return dockerfile, nil
}
