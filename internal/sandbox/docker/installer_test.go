package docker

import "testing"

func TestOOMKillsReadsEitherCgroupVersion(t *testing.T) {
	for _, c := range []struct {
		events string
		want   int
	}{
		{"low 0\nhigh 0\nmax 12\noom 3\noom_kill 2\noom_group_kill 0\n", 2}, // v2 memory.events
		{"oom_kill_disable 0\nunder_oom 0\noom_kill 1\n", 1},                // v1 memory.oom_control
		{"oom_kill_disable 0\nunder_oom 0\noom_kill 0\n", 0},
		{"", 0},
	} {
		if got := oomKills(c.events); got != c.want {
			t.Errorf("oomKills(%q) = %d, want %d", c.events, got, c.want)
		}
	}
}
