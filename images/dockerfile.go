package images

import (
	"archive/tar"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/moby/buildkit/frontend/dockerfile/parser"
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

// Instruction is one Dockerfile instruction as Docker's own parser
// (BuildKit's frontend/dockerfile/parser, which the engine's builders use)
// reads it: after the escape directive and line continuations are applied,
// blank continuation lines skipped, heredocs attached.
type Instruction struct {
	Line     int          // the line it starts on, from 1
	Op       string       // upper case: FROM, RUN, COPY, …
	Flags    []string     // as written: --from=stage, --link, …
	Args     []string     // the arguments (shell form: one; JSON form: each)
	Heredocs []string     // the heredocs' names (<<EOF)
	Trigger  *Instruction // ONBUILD's instruction
}

// String is the instruction on one line.
func (in Instruction) String() string {
	parts := append([]string{in.Op}, in.Flags...)
	if in.Trigger != nil {
		parts = append(parts, in.Trigger.String())
	}
	return strings.Join(append(parts, in.Args...), " ")
}

// Parse reads a Dockerfile with Docker's own parser.
func Parse(dockerfile string) ([]Instruction, error) {
	res, err := parser.Parse(strings.NewReader(dockerfile))
	if err != nil {
		return nil, err
	}
	out := make([]Instruction, 0, len(res.AST.Children))
	for _, n := range res.AST.Children {
		out = append(out, instruction(n))
	}
	return out, nil
}

func instruction(n *parser.Node) Instruction {
	in := Instruction{Line: n.StartLine, Op: strings.ToUpper(n.Value), Flags: n.Flags}
	for _, h := range n.Heredocs {
		in.Heredocs = append(in.Heredocs, h.Name)
	}
	if in.Op == "ONBUILD" && n.Next != nil && len(n.Next.Children) > 0 {
		t := instruction(n.Next.Children[0])
		t.Line = n.StartLine
		in.Trigger = &t
		return in
	}
	for a := n.Next; a != nil; a = a.Next {
		in.Args = append(in.Args, a.Value)
	}
	return in
}

// Instructions are a Dockerfile's instructions, one line each (nil when
// Docker's parser refuses it: a build would fail too).
func Instructions(dockerfile string) []string {
	parsed, err := Parse(dockerfile)
	if err != nil {
		return nil
	}
	out := make([]string, len(parsed))
	for i, in := range parsed {
		out[i] = in.String()
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
