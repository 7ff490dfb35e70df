package backend

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// Escape is a public escape from a container through the engine or the
// runtime under it: the component, the releases that fix it (one per line
// the project maintained), and what it does. docs/security.md shows the
// table; doctor fails on a hit, and serve logs it (policy
// refuse_known_escapes refuses to serve).
type Escape struct {
	CVE       string
	Component string   // "runc" or "docker" (the Docker engine, moby)
	Fixed     []string // the fixed release of each line, oldest first
	What      string
	// Backports are distributions' packages of an affected release that
	// carry the fix, as the engine names them (runc's GitCommit).
	Backports []string
	// Mitigated, when set, says what sandboxer does so that the escape
	// cannot be used: doctor shows it, and it is no failure.
	Mitigated string
}

// KnownEscapes is the table, oldest first.
var KnownEscapes = []Escape{
	{"CVE-2019-5736", "runc", []string{"1.0.0-rc7"},
		"a container overwrites the host's runc binary through /proc/self/exe and runs as root on the host", nil, ""},
	{"CVE-2024-21626", "runc", []string{"1.1.12"},
		"a file descriptor of the host's /sys/fs/cgroup leaks into the container: its working directory or an exec reaches the host's filesystem (Leaky Vessels)",
		[]string{"1.1.5+ds1-1+deb12u1"}, ""},
	{"CVE-2025-31133", "runc", []string{"1.2.8", "1.3.3", "1.4.0-rc.3"},
		"an image that makes /dev/null a link has runc bind-mount a host path of its choosing over a masked path, writable", nil, ""},
	{"CVE-2025-52565", "runc", []string{"1.2.8", "1.3.3", "1.4.0-rc.3"},
		"races on the /dev/console bind mount let a container write procfs files of the host", nil, ""},
	{"CVE-2025-52881", "runc", []string{"1.2.8", "1.3.3", "1.4.0-rc.3"},
		"shared mounts redirect runc's writes to /proc (LSM labels, sysctls) to other procfs files: the container writes the host's", nil, ""},
	{"CVE-2024-29018", "docker", []string{"23.0.11", "25.0.5", "26.0.0"},
		"a container on an internal network reaches external DNS through the embedded resolver when the host's resolver is on loopback: data leaves in DNS names",
		nil, "sandboxer gives its sandboxes on the egress network no resolver (DNS 0.0.0.0): the embedded resolver forwards nothing out (TestEgressJobsHaveNoResolver)"},
}

// EscapesOf are the known escapes a component's version has (pkg: the
// distribution's package of it, where the engine names one, for the
// backports). A version that cannot be read is reported as such by the
// caller, never as clean.
func EscapesOf(component, version, pkg string) ([]Escape, error) {
	v, err := parseVersion(version)
	if err != nil {
		return nil, err
	}
	var hits []Escape
	for _, e := range KnownEscapes {
		if e.Component == component && affected(v, e.Fixed) && (pkg == "" || !slices.Contains(e.Backports, pkg)) {
			hits = append(hits, e)
		}
	}
	return hits, nil
}

// affected: v is older than its line's fixed release, or its line has none
// and v is older than the newest fixed release (a line left unfixed).
func affected(v version, fixed []string) bool {
	newest := version{}
	for _, f := range fixed {
		fv, err := parseVersion(f)
		if err != nil {
			continue
		}
		if fv.nums[0] == v.nums[0] && fv.nums[1] == v.nums[1] {
			return v.less(fv)
		}
		if newest.less(fv) {
			newest = fv
		}
	}
	return v.less(newest)
}

// version is a release: major.minor.patch and a pre-release ("rc.3").
type version struct {
	nums [3]int
	pre  string
}

var versionPattern = regexp.MustCompile(`^v?(\d+)\.(\d+)(?:\.(\d+))?(?:-((?:rc|beta|alpha)[.\d]*))?`)

// parseVersion reads "1.1.5", "v1.3.3", "1.4.0-rc.3", and what packagers
// add after a release ("1.1.5+ds1", "20.10.24+dfsg1", "1.1.5-0-gf19387a").
func parseVersion(s string) (version, error) {
	m := versionPattern.FindStringSubmatch(strings.TrimSpace(s))
	if m == nil {
		return version{}, fmt.Errorf("version %q is not major.minor[.patch]", s)
	}
	var v version
	for i := 0; i < 3; i++ {
		v.nums[i], _ = strconv.Atoi(m[i+1])
	}
	v.pre = m[4]
	return v, nil
}

// less orders releases; a pre-release comes before its release.
func (v version) less(w version) bool {
	for i := range v.nums {
		if v.nums[i] != w.nums[i] {
			return v.nums[i] < w.nums[i]
		}
	}
	switch {
	case v.pre == w.pre:
		return false
	case v.pre == "":
		return false
	case w.pre == "":
		return true
	}
	return comparePre(v.pre, w.pre) < 0
}

// comparePre compares "rc.3" with "rc.10" part by part, numbers as numbers.
func comparePre(a, b string) int {
	pa, pb := strings.FieldsFunc(a, isDot), strings.FieldsFunc(b, isDot)
	for i := 0; i < len(pa) && i < len(pb); i++ {
		na, ea := strconv.Atoi(pa[i])
		nb, eb := strconv.Atoi(pb[i])
		switch {
		case ea == nil && eb == nil && na != nb:
			if na < nb {
				return -1
			}
			return 1
		case (ea != nil || eb != nil) && pa[i] != pb[i]:
			return strings.Compare(pa[i], pb[i])
		}
	}
	return len(pa) - len(pb)
}

func isDot(r rune) bool { return r == '.' }
