package secret

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandboxer/sandboxer/internal/sandbox"
)

func TestSourceRead(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good")
	os.WriteFile(good, []byte("tok-123\n"), 0o600)
	open := filepath.Join(dir, "open")
	os.WriteFile(open, []byte("tok"), 0o644)
	empty := filepath.Join(dir, "empty")
	os.WriteFile(empty, nil, 0o600)
	env := func(k string) string { return map[string]string{"TOKEN": "from-env", "NL": "a\nb"}[k] }

	if v, err := (Source{File: good}).Read(env); err != nil || string(v) != "tok-123" {
		t.Fatalf("file: %q %v", v, err)
	}
	if v, err := (Source{Env: "TOKEN"}).Read(env); err != nil || string(v) != "from-env" {
		t.Fatalf("env: %q %v", v, err)
	}
	for _, c := range []struct {
		src  Source
		want string
	}{
		{Source{File: open}, "mode 0644"},
		{Source{File: empty}, "is empty"},
		{Source{File: filepath.Join(dir, "none")}, "no such file"},
		{Source{File: dir}, "not a regular file"},
		{Source{Env: "UNSET"}, "UNSET is empty or not set"},
		{Source{Env: "NL"}, "line break"},
		{Source{}, "no value_file or env"},
	} {
		if _, err := c.src.Read(env); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: got %v, want %q", c.src, err, c.want)
		}
	}
}

func TestPlaceholdersAreFreshEachTime(t *testing.T) {
	a, b := NewPlaceholder(), NewPlaceholder()
	if a == b || !strings.HasPrefix(a, placeholderPrefix) || len(a) != len(placeholderPrefix)+32 {
		t.Fatalf("placeholders %q %q", a, b)
	}
	uses := []sandbox.SecretUse{{Name: "A", Placeholder: NewPlaceholder()}, {Name: "B", Placeholder: NewPlaceholder()}}
	if env := Env(uses); len(env) != 2 || env[0] != "A="+uses[0].Placeholder {
		t.Fatalf("env %v", env)
	}
}

type sink map[sandbox.Stream]*strings.Builder

func (s sink) Write(stream sandbox.Stream, p []byte) {
	if s[stream] == nil {
		s[stream] = &strings.Builder{}
	}
	s[stream].Write(p)
}

func TestRedactorReplacesValuesAcrossWrites(t *testing.T) {
	out := sink{}
	r := NewRedactor(out)
	r.Add([]byte("s3cr3t-value"), "PH1")
	r.Add([]byte("other"), "PH2")
	// The value split in every possible place, beside text that begins it.
	text := "a s3cr3t-value b s3cr3t s3cr3t-valu s3cr3t-value! other ot"
	for cut := 0; cut <= len(text); cut++ {
		out := sink{}
		r.next = out
		r.Write(sandbox.Stdout, []byte(text[:cut]))
		r.Write(sandbox.Stdout, []byte(text[cut:]))
		r.Flush()
		want := "a PH1 b s3cr3t s3cr3t-valu PH1! PH2 ot"
		if got := out[sandbox.Stdout].String(); got != want {
			t.Fatalf("cut %d: %q, want %q", cut, got, want)
		}
	}
	// One byte at a time, on both streams.
	out = sink{}
	r.next = out
	for i := range len(text) {
		r.Write(sandbox.Stderr, []byte{text[i]})
		r.Write(sandbox.Stdout, []byte{text[i]})
	}
	r.Flush()
	if out[sandbox.Stdout].String() != out[sandbox.Stderr].String() || strings.Contains(out[sandbox.Stdout].String(), "s3cr3t-value") {
		t.Fatalf("byte at a time: %q / %q", out[sandbox.Stdout], out[sandbox.Stderr])
	}
}

func TestRedactorHoldsOnlyWhatCouldBeginAValue(t *testing.T) {
	out := sink{}
	r := NewRedactor(out)
	r.Add([]byte("xyz-secret"), "PH")
	r.Write(sandbox.Stdout, []byte("$ "))
	if got := out[sandbox.Stdout].String(); got != "$ " {
		t.Fatalf("a prompt is held back: %q", got)
	}
	r.Write(sandbox.Stdout, []byte("xy"))
	if got := out[sandbox.Stdout].String(); got != "$ " {
		t.Fatalf("a value's beginning passed: %q", got)
	}
	r.Flush()
	if got := out[sandbox.Stdout].String(); got != "$ xy" {
		t.Fatalf("after flush: %q", got)
	}
}
