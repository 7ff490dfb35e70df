package console

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/sandboxer/sandboxer/internal/auth"
)

// Sign-in sessions.
const (
	cookieName = "sandboxer_console"
	// SessionTTL is how long a sign-in lasts.
	SessionTTL = 12 * time.Hour
	// maxSessions bounds the sessions kept: the oldest is dropped first.
	maxSessions = 1000
)

// session is one browser's sign-in. The browser holds only its random id,
// never the token.
type session struct {
	tenant, role string
	csrf         string
	expires      time.Time
}

// sessions are the signed-in browsers, in memory: a restart signs everyone out.
type sessions struct {
	mu sync.Mutex
	m  map[string]*session
}

func randomID() string {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	return base64.RawURLEncoding.EncodeToString(b)
}

func (s *sessions) add(tenant, role string) (id string, sess *session) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	if len(s.m) >= maxSessions {
		var oldest string
		for k, v := range s.m {
			if v.expires.Before(now) {
				delete(s.m, k)
			} else if oldest == "" || v.expires.Before(s.m[oldest].expires) {
				oldest = k
			}
		}
		if len(s.m) >= maxSessions {
			delete(s.m, oldest)
		}
	}
	id = randomID()
	sess = &session{tenant: tenant, role: role, csrf: randomID(), expires: now.Add(SessionTTL)}
	s.m[id] = sess
	return id, sess
}

func (s *sessions) get(id string) *session {
	if id == "" {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	sess := s.m[id]
	if sess == nil {
		return nil
	}
	if time.Now().After(sess.expires) {
		delete(s.m, id)
		return nil
	}
	return sess
}

func (s *sessions) remove(id string) {
	s.mu.Lock()
	delete(s.m, id)
	s.mu.Unlock()
}

// who is the client of a request: its sign-in cookie's session, or a bearer
// token (for scripts; a browser never sends one by itself). nil: neither.
func (c *Console) who(r *http.Request) *session {
	if ck, err := r.Cookie(cookieName); err == nil {
		if sess := c.sessions.get(ck.Value); sess != nil {
			return sess
		}
	}
	if tok := auth.BearerToken(r); tok != "" {
		if name, role, ok := c.auth.Authenticate(tok); ok {
			return &session{tenant: name, role: role}
		}
	}
	return nil
}

// sameOrigin says whether a POST comes from the console's own pages. A
// browser's Sec-Fetch-Site must say same-origin; without it (older browsers)
// its Origin must name this host. A form on another site, even one on another
// port of the same host, is refused.
func sameOrigin(r *http.Request) bool {
	if site := r.Header.Get("Sec-Fetch-Site"); site != "" {
		return site == "same-origin"
	}
	if o := r.Header.Get("Origin"); o != "" {
		u, err := url.Parse(o)
		return err == nil && (u.Scheme == "http" || u.Scheme == "https") && strings.EqualFold(u.Host, r.Host)
	}
	return true // not a browser: it holds the token or the cookie itself
}

// csrfOK checks a POST's form token against its session's, in constant time.
func csrfOK(r *http.Request, sess *session) bool {
	got := r.PostFormValue("csrf")
	return sess.csrf != "" && subtle.ConstantTimeCompare([]byte(got), []byte(sess.csrf)) == 1
}

func (c *Console) setCookie(w http.ResponseWriter, r *http.Request, value string, maxAge int) {
	http.SetCookie(w, &http.Cookie{
		Name: cookieName, Value: value, Path: "/ui", MaxAge: maxAge,
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil,
	})
}
