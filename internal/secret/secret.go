// Package secret is a credential a job uses without holding it: where its
// value lives on the server (a mode-0600 file or one of the server's
// environment variables, read at each use so a rotation needs no restart),
// the placeholder a sandbox sees in its place, and the redaction that puts
// the placeholder back wherever the value shows up in a job's output.
// The egress proxy swaps placeholders for values (internal/egress).
package secret

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"

	"github.com/sandboxer/sandboxer/internal/sandbox"
)

// MaxValueBytes bounds a secret's value: a credential, not a file.
const MaxValueBytes = 16 << 10

// NamePattern is what a secret's name must look like: it becomes the name
// of an environment variable in the sandbox.
var NamePattern = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,63}$`)

// Source is where a secret's value lives: File (absolute, mode 0600) or
// Env (a variable of the server's environment), exactly one.
type Source struct {
	File string
	Env  string
}

// Read reads the value now. A file must be a regular file that only its
// owner may read or write (mode 0600 or stricter); one trailing newline is
// dropped, as editors add it. An empty value is an error: a placeholder
// swapped for nothing would fail far from its cause.
func (s Source) Read(getenv func(string) string) ([]byte, error) {
	var v []byte
	switch {
	case s.File != "":
		f, err := os.Open(s.File)
		if err != nil {
			return nil, fmt.Errorf("value_file: %w", err)
		}
		defer f.Close()
		fi, err := f.Stat()
		if err != nil {
			return nil, fmt.Errorf("value_file: %w", err)
		}
		if !fi.Mode().IsRegular() {
			return nil, fmt.Errorf("value_file %s is not a regular file", s.File)
		}
		if perm := fi.Mode().Perm(); perm&0o077 != 0 {
			return nil, fmt.Errorf("value_file %s has mode %04o: make it 0600 (only its owner may read it)", s.File, perm)
		}
		v, err = io.ReadAll(io.LimitReader(f, MaxValueBytes+1))
		if err != nil {
			return nil, fmt.Errorf("value_file: %w", err)
		}
		if len(v) > MaxValueBytes {
			return nil, fmt.Errorf("value_file %s is longer than %d bytes", s.File, MaxValueBytes)
		}
		v = []byte(strings.TrimSuffix(strings.TrimSuffix(string(v), "\n"), "\r"))
	case s.Env != "":
		v = []byte(getenv(s.Env))
		if len(v) > MaxValueBytes {
			return nil, fmt.Errorf("env %s is longer than %d bytes", s.Env, MaxValueBytes)
		}
	default:
		return nil, errors.New("no value_file or env")
	}
	if len(v) == 0 {
		if s.File != "" {
			return nil, fmt.Errorf("value_file %s is empty", s.File)
		}
		return nil, fmt.Errorf("env %s is empty or not set in the server's environment", s.Env)
	}
	if strings.ContainsAny(string(v), "\r\n\x00") {
		return nil, errors.New("the value holds a line break or NUL: it could not go into an HTTP header")
	}
	return v, nil
}

// placeholderPrefix starts every placeholder, so a reader of a job's
// environment or output sees what it is.
const placeholderPrefix = "sbx_placeholder_"

// NewPlaceholder is a fresh placeholder: random (128 bits), so it is
// unique to the job or workspace it is made for and means nothing
// anywhere else.
func NewPlaceholder() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return placeholderPrefix + hex.EncodeToString(b)
}

// Env is the environment that gives a job its placeholders.
func Env(uses []sandbox.SecretUse) []string {
	env := make([]string, len(uses))
	for i, u := range uses {
		env[i] = u.Name + "=" + u.Placeholder
	}
	return env
}
