package kubernetes

import (
	"errors"
	"testing"
)

// A metrics label never carries a pod's name.
func TestOperation(t *testing.T) {
	for in, want := range map[string]string{
		"exec in pod sandboxer-x7k2p: EOF":                 "exec in pod",
		"create pod: forbidden":                            "create pod",
		"label pod sandboxer-abcde with its job: conflict": "label pod with its job",
		"list pods": "list pods",
	} {
		if got := operation(errors.New(in)); got != want {
			t.Errorf("operation(%q) = %q, want %q", in, got, want)
		}
	}
}
