// Package auth reads the token file that guards the HTTP listener (metrics
// and console): one client per line, `NAME TOKEN [ROLE]`. TOKEN is the token
// itself or `sha256:HEX` of it; ROLE is user (the default), readonly,
// metrics or admin. Blank lines and lines starting with # are skipped.
//
// Tokens are kept only as SHA-256 digests and compared in constant time.
package auth

import (
	"bufio"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"strings"
)

// Roles.
const (
	RoleUser     = "user"
	RoleReadonly = "readonly"
	RoleMetrics  = "metrics"
	RoleAdmin    = "admin"
)

// Entry is one client of the token file.
type Entry struct {
	Name   string
	Role   string
	digest [sha256.Size]byte
}

// Tokens is a parsed token file.
type Tokens struct{ entries []Entry }

// Load reads a token file. A file others may read is refused: its tokens
// would be anyone's.
func Load(path string) (*Tokens, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("token file: %w", err)
	}
	defer f.Close()
	if fi, err := f.Stat(); err == nil && fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("token file %s: mode %v lets other users read it; chmod 600 it", path, fi.Mode().Perm())
	}
	t, err := Parse(f)
	if err != nil {
		return nil, fmt.Errorf("token file %s: %w", path, err)
	}
	return t, nil
}

// Parse reads the token file format.
func Parse(r io.Reader) (*Tokens, error) {
	t := &Tokens{}
	names := map[string]bool{}
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) < 2 || len(f) > 3 {
			return nil, fmt.Errorf("line %d: want NAME TOKEN [ROLE]", n)
		}
		e := Entry{Name: f[0], Role: RoleUser}
		if len(f) == 3 {
			e.Role = f[2]
		}
		switch e.Role {
		case RoleUser, RoleReadonly, RoleMetrics, RoleAdmin:
		default:
			return nil, fmt.Errorf("line %d: role %q: want user, readonly, metrics or admin", n, e.Role)
		}
		if names[e.Name] {
			return nil, fmt.Errorf("line %d: name %q appears twice", n, e.Name)
		}
		names[e.Name] = true
		if hexDigest, ok := strings.CutPrefix(f[1], "sha256:"); ok {
			b, err := hex.DecodeString(hexDigest)
			if err != nil || len(b) != sha256.Size {
				return nil, fmt.Errorf("line %d: sha256: wants 64 hex digits", n)
			}
			copy(e.digest[:], b)
		} else {
			if len(f[1]) < 16 {
				return nil, fmt.Errorf("line %d: token shorter than 16 characters", n)
			}
			e.digest = sha256.Sum256([]byte(f[1]))
		}
		t.entries = append(t.entries, e)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(t.entries) == 0 {
		return nil, fmt.Errorf("no tokens")
	}
	return t, nil
}

// Authenticate returns the client (tenant) and role a token belongs to.
// Every entry is compared, so the time taken says nothing of which matched.
func (t *Tokens) Authenticate(token string) (tenant, role string, ok bool) {
	if t == nil || token == "" {
		return "", "", false
	}
	d := sha256.Sum256([]byte(token))
	for _, e := range t.entries {
		if subtle.ConstantTimeCompare(d[:], e.digest[:]) == 1 {
			tenant, role, ok = e.Name, e.Role, true
		}
	}
	return tenant, role, ok
}
