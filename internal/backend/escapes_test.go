package backend

import (
	"slices"
	"testing"
)

func cves(es []Escape) []string {
	var out []string
	for _, e := range es {
		out = append(out, e.CVE)
	}
	return out
}

// The reference host's runc and Docker have known escapes; the fixed
// releases of each line, and anything newer, have none.
func TestEscapesOf(t *testing.T) {
	for _, c := range []struct {
		component, version string
		want               []string
	}{
		{"runc", "1.1.5+ds1", []string{"CVE-2024-21626", "CVE-2025-31133", "CVE-2025-52565", "CVE-2025-52881"}},
		{"runc", "1.1.5-0-gf19387a", []string{"CVE-2024-21626", "CVE-2025-31133", "CVE-2025-52565", "CVE-2025-52881"}},
		{"runc", "1.0.0-rc6", []string{"CVE-2019-5736", "CVE-2024-21626", "CVE-2025-31133", "CVE-2025-52565", "CVE-2025-52881"}},
		{"runc", "1.1.12", []string{"CVE-2025-31133", "CVE-2025-52565", "CVE-2025-52881"}},
		{"runc", "1.2.7", []string{"CVE-2025-31133", "CVE-2025-52565", "CVE-2025-52881"}},
		{"runc", "1.2.8", nil},
		{"runc", "1.3.2", []string{"CVE-2025-31133", "CVE-2025-52565", "CVE-2025-52881"}},
		{"runc", "v1.3.3", nil},
		{"runc", "1.4.0-rc.2", []string{"CVE-2025-31133", "CVE-2025-52565", "CVE-2025-52881"}},
		{"runc", "1.4.0-rc.3", nil},
		{"runc", "1.4.0", nil},
		{"runc", "1.5.3", nil},
		{"docker", "20.10.24+dfsg1", []string{"CVE-2024-29018"}},
		{"docker", "24.0.9", []string{"CVE-2024-29018"}},
		{"docker", "25.0.5", nil},
		{"docker", "26.0.0", nil},
		{"docker", "28.2.2", nil},
	} {
		got, err := EscapesOf(c.component, c.version, "")
		if err != nil || !slices.Equal(cves(got), c.want) {
			t.Errorf("%s %s: %v %v, want %v", c.component, c.version, cves(got), err, c.want)
		}
	}
	// Debian's bookworm runc carries the fix of CVE-2024-21626, not those of 2025.
	if got, _ := EscapesOf("runc", "1.1.5+ds1", "1.1.5+ds1-1+deb12u1"); !slices.Equal(cves(got), []string{"CVE-2025-31133", "CVE-2025-52565", "CVE-2025-52881"}) {
		t.Errorf("Debian's runc: %v", cves(got))
	}
	if _, err := EscapesOf("runc", "unknown", ""); err == nil {
		t.Error("an unreadable version was taken as clean")
	}
}
