//go:build !linux

package memtrim

// dropBinaryPages is Linux-only; elsewhere the heap alone is trimmed.
func dropBinaryPages() {}
