package metrics

import (
	"net/http"

	"github.com/sandboxer/sandboxer/internal/auth"
)

// Authenticator says whose a token is (internal/auth.Tokens is one).
type Authenticator interface {
	Authenticate(token string) (tenant, role string, ok bool)
}

// Roles allowed to scrape.
var scrapeRoles = map[string]bool{"metrics": true, "admin": true}

// Scrape serves /metrics to a bearer token of role metrics or admin; any
// other request gets 401 (no or unknown token) or 403 (another role). The
// state families are read from src.
func (m *Metrics) Scrape(a Authenticator, src Sources) http.Handler {
	h := m.Handler(src)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, role, ok := a.Authenticate(auth.BearerToken(r))
		switch {
		case !ok:
			w.Header().Set("WWW-Authenticate", `Bearer realm="sandboxer"`)
			http.Error(w, "a token of role metrics or admin is needed: Authorization: Bearer TOKEN", http.StatusUnauthorized)
		case !scrapeRoles[role]:
			http.Error(w, "this token's role may not read metrics (needs metrics or admin)", http.StatusForbidden)
		default:
			h.ServeHTTP(w, r)
		}
	})
}

// CountRequests counts each request's status and tenant (the tenant of its
// bearer token, "anonymous" without a valid one).
func (m *Metrics) CountRequests(a Authenticator, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sw := &statusWriter{ResponseWriter: w, code: http.StatusOK}
		next.ServeHTTP(sw, r)
		tenant, _, _ := a.Authenticate(auth.BearerToken(r))
		m.HTTPRequest(sw.code, tenant)
	})
}

type statusWriter struct {
	http.ResponseWriter
	code  int
	wrote bool
}

func (s *statusWriter) WriteHeader(code int) {
	if !s.wrote {
		s.code, s.wrote = code, true
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusWriter) Write(b []byte) (int, error) {
	s.wrote = true
	return s.ResponseWriter.Write(b)
}

// Flush lets streamed responses (server-sent events) through.
func (s *statusWriter) Flush() {
	if f, ok := s.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}
