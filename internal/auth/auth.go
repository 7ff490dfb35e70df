// Package auth reads the token file that guards the HTTP listener (metrics
// and console): one client per line, `NAME TOKEN [ROLE] [LIMIT...]`. TOKEN is
// the token itself or `sha256:HEX` of it; ROLE is user (the default),
// readonly, metrics or admin; a LIMIT is jobs=N (concurrent jobs),
// workspaces=N, toolsets=a,b (the toolsets and presets it may call) or
// weight=N (its weight in the shares of the job slots, default 1).
// Blank lines and lines starting with # are skipped.
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
	"net/http"
	"os"
	"strconv"
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
	Name string
	Role string
	// Limits of the token (0 or empty: none beyond the policy's).
	Jobs, Workspaces int
	Toolsets         []string
	// Weight is its weight in the shares of jobs.max_concurrent (default 1).
	Weight int

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
		if len(f) < 2 {
			return nil, fmt.Errorf("line %d: want NAME TOKEN [ROLE] [jobs=N] [workspaces=N] [toolsets=a,b]", n)
		}
		e := Entry{Name: f[0], Role: RoleUser, Weight: 1}
		for i, field := range f[2:] {
			k, v, isLimit := strings.Cut(field, "=")
			if !isLimit {
				if i != 0 {
					return nil, fmt.Errorf("line %d: %q: the role comes third, limits (jobs=N, workspaces=N, toolsets=a,b) after it", n, field)
				}
				e.Role = field
				continue
			}
			if err := e.setLimit(k, v); err != nil {
				return nil, fmt.Errorf("line %d: %v", n, err)
			}
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

func (e *Entry) setLimit(k, v string) error {
	switch k {
	case "jobs", "workspaces":
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 10000 {
			return fmt.Errorf("%s=%q: want a number from 1 to 10000", k, v)
		}
		if k == "jobs" {
			e.Jobs = n
		} else {
			e.Workspaces = n
		}
	case "weight":
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || n > 1000 {
			return fmt.Errorf("weight=%q: want a number from 0 (no share of its own) to 1000", v)
		}
		e.Weight = n
	case "toolsets":
		for _, s := range strings.Split(v, ",") {
			if s = strings.TrimSpace(s); s != "" {
				e.Toolsets = append(e.Toolsets, s)
			}
		}
		if len(e.Toolsets) == 0 {
			return fmt.Errorf("toolsets= names no toolset")
		}
	default:
		return fmt.Errorf("unknown limit %q (jobs, workspaces, toolsets, weight)", k)
	}
	return nil
}

// Entries are the file's clients (no digests), for checks at start.
func (t *Tokens) Entries() []Entry {
	out := make([]Entry, len(t.entries))
	for i, e := range t.entries {
		out[i] = Entry{Name: e.Name, Role: e.Role, Jobs: e.Jobs, Workspaces: e.Workspaces, Toolsets: e.Toolsets, Weight: e.Weight}
	}
	return out
}

// ShareWeights are the weights of the clients that may run jobs (users and
// admins), for the shares of the job slots.
func (t *Tokens) ShareWeights() map[string]int {
	out := map[string]int{}
	for _, e := range t.entries {
		if e.Role == RoleUser || e.Role == RoleAdmin {
			out[e.Name] = e.Weight
		}
	}
	return out
}

// Limits are a client's limits (see Entry).
func (t *Tokens) Limits(name string) (jobs, workspaces int, toolsets []string) {
	for _, e := range t.entries {
		if e.Name == name {
			return e.Jobs, e.Workspaces, e.Toolsets
		}
	}
	return 0, 0, nil
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

// BearerToken is the token of an "Authorization: Bearer TOKEN" header, or "".
func BearerToken(r *http.Request) string {
	v, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok {
		return ""
	}
	return strings.TrimSpace(v)
}
