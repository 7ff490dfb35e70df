package main

import (
	"os"
	"strings"
	"testing"
	"time"
)

// TestCheckBestFailsAboveTheFactor: the first run records the machine's
// best, a faster one replaces it, and one above 1.5× the best fails.
func TestCheckBestFailsAboveTheFactor(t *testing.T) {
	if machineID() == "" {
		t.Skip("no /etc/machine-id")
	}
	t.Chdir(t.TempDir())
	if err := os.Mkdir("docs", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := checkBest(10 * time.Millisecond); err != nil {
		t.Fatalf("first run: %v", err)
	}
	if err := checkBest(8 * time.Millisecond); err != nil {
		t.Fatalf("a faster run: %v", err)
	}
	if err := checkBest(11900 * time.Microsecond); err != nil {
		t.Fatalf("1.49× the best: %v", err)
	}
	err := checkBest(12100 * time.Microsecond)
	if err == nil || !strings.Contains(err.Error(), "1.5× the recorded best 8.00 ms") {
		t.Fatalf("1.51× the best: %v", err)
	}
	data, _ := os.ReadFile(bestFile)
	if !strings.Contains(string(data), `"p50_ms": 8`) {
		t.Errorf("the record: %s", data)
	}
}
