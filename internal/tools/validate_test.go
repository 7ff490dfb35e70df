package tools

import (
	"strings"
	"testing"
)

func TestValidateCwd(t *testing.T) {
	tests := []struct {
		in, want, errHas string
	}{
		{"", "/workspace", ""},
		{"/workspace", "/workspace", ""},
		{"/workspace/src/", "/workspace/src", ""},
		{"src/app", "/workspace/src/app", ""},
		{"../..", "", "'..'"},
		{"/workspace/../etc", "", "'..'"},
		{"/proc/self/fd/7", "", "outside /workspace"},
		{"/etc", "", "outside /workspace"},
		{"/workspacex", "", "outside /workspace"},
		{"/workspace/a\x00b", "", "NUL"},
		{"/workspace/" + strings.Repeat("a", 2000), "", "limit"},
	}
	for _, tt := range tests {
		got, err := validateCwd(tt.in)
		if tt.errHas != "" {
			if err == nil || !strings.Contains(err.Error(), tt.errHas) {
				t.Errorf("validateCwd(%q) error = %v, want one containing %q", tt.in, err, tt.errHas)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("validateCwd(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
		}
	}
}

func TestValidateEnv(t *testing.T) {
	tests := []struct {
		name   string
		env    map[string]string
		want   []string
		errHas string
	}{
		{"sorted", map[string]string{"B": "2", "A": "1"}, []string{"A=1", "B=2"}, ""},
		{"value with =", map[string]string{"A": "x=y"}, []string{"A=x=y"}, ""},
		{"key with =", map[string]string{"A=B": "1"}, nil, "not a valid name"},
		{"empty key", map[string]string{"": "1"}, nil, "not a valid name"},
		{"digit first", map[string]string{"1A": "1"}, nil, "not a valid name"},
		{"LD_PRELOAD", map[string]string{"LD_PRELOAD": "/x.so"}, nil, "not allowed"},
		{"NUL value", map[string]string{"A": "a\x00b"}, nil, "NUL"},
		{"huge value", map[string]string{"A": strings.Repeat("x", 1<<20)}, nil, "limit"},
	}
	for _, tt := range tests {
		got, err := validateEnv(tt.env)
		if tt.errHas != "" {
			if err == nil || !strings.Contains(err.Error(), tt.errHas) {
				t.Errorf("%s: error = %v, want one containing %q", tt.name, err, tt.errHas)
			}
			continue
		}
		if err != nil || strings.Join(got, ",") != strings.Join(tt.want, ",") {
			t.Errorf("%s: got %v, %v; want %v", tt.name, got, err, tt.want)
		}
	}
	many := map[string]string{}
	for i := 0; i < maxEnvVars+1; i++ {
		many["K"+strings.Repeat("x", i)] = "v"
	}
	if _, err := validateEnv(many); err == nil {
		t.Error("more than maxEnvVars variables accepted")
	}
}

func TestValidateCommandAndJobID(t *testing.T) {
	for _, c := range []string{"", "   ", "echo a\x00b", strings.Repeat("x", maxCommandBytes+1), "\xff\xfe"} {
		if validateCommand("command", c) == nil {
			t.Errorf("command %q accepted", truncate(c, 20))
		}
	}
	if err := validateCommand("command", "echo ok"); err != nil {
		t.Error(err)
	}
	for _, id := range []string{"", "abc", "../x", "123e4567-e89b-12d3-a456-42661417400G"} {
		if validateJobID(id) == nil {
			t.Errorf("job id %q accepted", id)
		}
	}
	if err := validateJobID("123e4567-e89b-12d3-a456-426614174000"); err != nil {
		t.Error(err)
	}
}
