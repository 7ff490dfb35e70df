package audit

import (
	"regexp"
	"strings"
)

// secretKey matches names that usually hold secrets.
const secretKey = `[A-Za-z0-9_.-]*(?i:token|secret|passw(?:or)?d|passwd|pwd|api[_-]?key|apikey|access[_-]?key|private[_-]?key|key|auth|credential|cookie|session)[A-Za-z0-9_.-]*`

var redactions = []struct {
	re   *regexp.Regexp
	repl string
}{
	// Authorization headers and bearer tokens.
	{regexp.MustCompile(`(?i)(authorization:\s*(?:bearer|basic|token)?\s*)[^\s'"]+`), `${1}[REDACTED]`},
	{regexp.MustCompile(`(?i)(bearer\s+)[A-Za-z0-9._~+/=-]+`), `${1}[REDACTED]`},
	// KEY=VALUE, KEY: VALUE, --password=VALUE, --token VALUE with a secret-ish key.
	{regexp.MustCompile(`((?:^|[\s;&|('"\x60{,])-{0,2}` + secretKey + `\s*[=:]\s*)("[^"]*"|'[^']*'|[^\s;&|)'"\x60,}]+)`), `${1}[REDACTED]`},
	{regexp.MustCompile(`(--?` + secretKey + `\s+)("[^"]*"|'[^']*'|[^\s;&|)'"\x60]+)`), `${1}[REDACTED]`},
	// user:password@ in URLs.
	{regexp.MustCompile(`(://[^/\s:@]+:)[^@\s/]+@`), `${1}[REDACTED]@`},
	// Well-known token shapes.
	{regexp.MustCompile(`\b(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}|sk-[A-Za-z0-9_-]{20,}|xox[abprs]-[A-Za-z0-9-]{10,}|AKIA[0-9A-Z]{16}|glpat-[A-Za-z0-9_-]{20,}|eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,})`), `[REDACTED]`},
	// Long hex or base64 blobs (keys, hashes of secrets) of 32+ characters.
	{regexp.MustCompile(`\b[A-Fa-f0-9]{40,}\b`), `[REDACTED]`},
	{regexp.MustCompile(`[A-Za-z0-9+/_-]{40,}={0,2}`), `[REDACTED]`},
}

// Redact hides what looks like a secret in s: values after secret-ish keys
// (TOKEN=…, --password …, api_key: …), bearer tokens and Authorization
// headers, credentials in URLs, well-known token shapes and long hex or
// base64 blobs.
func Redact(s string) string {
	if s == "" {
		return s
	}
	for _, r := range redactions {
		s = r.re.ReplaceAllString(s, r.repl)
	}
	return s
}

// RedactValues replaces every occurrence of each value (e.g. the env values
// of a call) in s; values shorter than 4 bytes are left, as they would
// redact ordinary words.
func RedactValues(s string, values []string) string {
	for _, v := range values {
		if len(v) >= 4 {
			s = strings.ReplaceAll(s, v, "[REDACTED]")
		}
	}
	return s
}
