package docker

import "testing"

// A claimed warm container's name carries its job's id and kind; a name
// from a server before kinds were in it gives the id alone.
func TestClaimedName(t *testing.T) {
	id := "48adbcd2-ea60-48fe-b041-8807354a5544"
	for _, tc := range []struct {
		name, id, kind string
		ok             bool
	}{
		{"/" + claimedName(id, "command"), id, "command", true},
		{claimedName(id, "session"), id, "session", true},
		{"/sandboxer-job-" + id, id, "", true},
		{"/sandboxer-job-", "", "", false},
		{"/sandboxer-pool-1", "", "", false},
	} {
		gotID, gotKind, ok := parseClaimedName(tc.name)
		if gotID != tc.id || gotKind != tc.kind || ok != tc.ok {
			t.Errorf("parseClaimedName(%q) = %q, %q, %v; want %q, %q, %v", tc.name, gotID, gotKind, ok, tc.id, tc.kind, tc.ok)
		}
	}
}
