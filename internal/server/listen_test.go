package server

import "testing"

// TestLoopbackAddr (threat 84): a bare port never listens beyond the host.
func TestLoopbackAddr(t *testing.T) {
	for in, want := range map[string]string{
		":9464":         "127.0.0.1:9464",
		"0.0.0.0:9464":  "0.0.0.0:9464",
		"[::1]:9464":    "[::1]:9464",
		"10.0.0.5:9464": "10.0.0.5:9464",
	} {
		if got := loopbackAddr(in); got != want {
			t.Errorf("loopbackAddr(%q) = %q, want %q", in, got, want)
		}
	}
}
