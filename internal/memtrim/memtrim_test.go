package memtrim

import (
	"testing"
	"time"
)

func TestTrimmerFiresOnceIdleAndNotWhileBusy(t *testing.T) {
	fired := make(chan struct{}, 10)
	tr := New(20*time.Millisecond, func() { fired <- struct{}{} })
	defer tr.Close()
	waitFire(t, fired, "a trimmer that was just made (an idle server)")

	tr.Begin()
	select {
	case <-fired:
		t.Fatal("trimmed while a call was in flight")
	case <-time.After(300 * time.Millisecond):
	}
	tr.End()
	waitFire(t, fired, "the last call ended")

	// Idle stays idle: no second trim until another call.
	select {
	case <-fired:
		t.Fatal("trimmed twice without a call between")
	case <-time.After(300 * time.Millisecond):
	}
}

func TestTrimmerClosed(t *testing.T) {
	fired := make(chan struct{}, 1)
	tr := New(10*time.Millisecond, func() { fired <- struct{}{} })
	tr.Close()
	tr.Begin()
	tr.End()
	select {
	case <-fired:
		t.Fatal("a closed trimmer trimmed")
	case <-time.After(200 * time.Millisecond):
	}
}

func waitFire(t *testing.T, fired chan struct{}, after string) {
	t.Helper()
	select {
	case <-fired:
	case <-time.After(30 * time.Second):
		t.Fatalf("no trim after %s", after)
	}
}
