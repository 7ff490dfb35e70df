package proto

import (
	"strings"
	"testing"
)

func TestMatchPattern(t *testing.T) {
	for _, tc := range []struct {
		pat, name string
		want      bool
	}{
		{"*.csv", "a.csv", true},
		{"*.csv", "out/a.csv", false},
		{"out/*.csv", "out/a.csv", true},
		{"**/*.csv", "a.csv", true},
		{"**/*.csv", "x/y/a.csv", true},
		{"out/**", "out/x/y", true},
		{"out/**", "other/x", false},
		{"report.html", "report.html", true},
		{"[a-c].txt", "b.txt", true},
	} {
		if got := MatchPattern(tc.pat, tc.name); got != tc.want {
			t.Errorf("MatchPattern(%q, %q) = %v, want %v", tc.pat, tc.name, got, tc.want)
		}
	}
}

func TestCheckPattern(t *testing.T) {
	for pat, want := range map[string]string{
		"":                       "empty",
		"/etc/passwd":            "absolute",
		"../x":                   "not a clean path",
		"a/../../x":              "not a clean path",
		"a//b":                   "not a clean path",
		"[":                      "syntax error",
		"a\\b":                   "backslash",
		strings.Repeat("a", 300): "longer than",
		"out/*.csv":              "",
		"**/*.png":               "",
	} {
		err := CheckPattern(pat)
		if want == "" && err != nil || want != "" && (err == nil || !strings.Contains(err.Error(), want)) {
			t.Errorf("CheckPattern(%.20q) = %v, want %q", pat, err, want)
		}
	}
}

func TestFileFrameRoundTrip(t *testing.T) {
	h := FileHeader{Path: "out/a.csv", Kind: KindFile, Size: 3, Offset: 0}
	p, err := EncodeFile(h, []byte("a,b"))
	if err != nil {
		t.Fatal(err)
	}
	got, part, err := DecodeFile(p)
	if err != nil || got != h || string(part) != "a,b" {
		t.Fatalf("decoded %+v %q %v", got, part, err)
	}
	for _, bad := range [][]byte{nil, {0}, {0, 9, '{'}, {0, 2, 'x', 'y'}} {
		if _, _, err := DecodeFile(bad); err == nil {
			t.Errorf("DecodeFile(%q) took a bad frame", bad)
		}
	}
}
