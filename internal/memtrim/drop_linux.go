package memtrim

import (
	"bufio"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// dropBinaryPages unmaps the pages of the executable's read-only mappings
// (code and read-only data: never written, so nothing is lost). The kernel
// may evict such pages at any time and maps them back from the page cache on
// the next touch; this only does it now. Writable mappings are left alone.
func dropBinaryPages() {
	exe, err := os.Readlink("/proc/self/exe")
	if err != nil {
		return
	}
	f, err := os.Open("/proc/self/maps")
	if err != nil {
		return
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		start, end, ok := readOnlyMappingOf(sc.Text(), exe)
		if ok {
			_, _, _ = unix.Syscall(unix.SYS_MADVISE, start, end-start, unix.MADV_DONTNEED)
		}
	}
}

// readOnlyMappingOf parses one line of /proc/self/maps ("start-end perms
// offset dev inode path") and says whether it maps path without write
// permission, as a private mapping.
func readOnlyMappingOf(line, path string) (start, end uintptr, ok bool) {
	fields := strings.Fields(line)
	if len(fields) < 6 || strings.Join(fields[5:], " ") != path {
		return 0, 0, false
	}
	perms := fields[1]
	if len(perms) != 4 || perms[0] != 'r' || perms[1] != '-' || perms[3] != 'p' {
		return 0, 0, false
	}
	lo, hi, found := strings.Cut(fields[0], "-")
	if !found {
		return 0, 0, false
	}
	s, err1 := strconv.ParseUint(lo, 16, 64)
	e, err2 := strconv.ParseUint(hi, 16, 64)
	if err1 != nil || err2 != nil || e <= s {
		return 0, 0, false
	}
	return uintptr(s), uintptr(e), true
}
