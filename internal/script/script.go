// Package script turns source code in a language into what one sandbox runs:
// a small bash driver that reads the source from the start of its stdin,
// writes it under ScriptDir, compiles it where the language needs that
// (reporting the compile step in a block at the very start of stderr), and
// then execs the program with the caller's args and the rest of stdin.
//
// The compile block is the structured channel for the compile step: the driver
// writes, before anything else reaches stderr,
//
//	\x1esandboxer-compile exit=<code> ms=<duration> stdout=<n> stderr=<m>\n
//	<n bytes of the compiler's stdout><m bytes of its stderr>
//	\x1esandboxer-compile-end\n
//
// so its position (offset 0) and sizes are known exactly; ParseCompile reads
// it back. A program cannot forge it: the block is complete before the program
// starts, and only offset 0 counts.
//
// What each language's source is called, how it compiles and runs, are its
// record's (lang.Script). A language whose image carries its own runner
// (lang.Script.Main: javascript's script-main.js) skips the driver in a fresh
// sandbox: the runner does the same in the language's runtime, which a warm
// sandbox can start before the job (sandbox.Prestart). With a setup step
// (dependencies) it does so only when the runner does that step too
// (lang.Script.MainDeps).
package script

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"

	"github.com/sandboxer/sandboxer/internal/lang"
)

// ScriptDir is where the driver writes the source and the build output (on the
// /tmp tmpfs, so /workspace keeps only what the program itself writes).
const ScriptDir = "/tmp/sandboxer-script"

// SourceBytesEnv tells the driver how many bytes of stdin are the source.
const SourceBytesEnv = "SANDBOXER_SOURCE_BYTES"

// GoCacheSeed is the go image's prebuilt, read-only build cache of the
// standard library; the image's GOCACHEPROG (the supervisor) reads it and
// writes only to the job's own GOCACHE.
const GoCacheSeed = "/usr/local/share/go-build-seed"

// MaxSourceBytes caps the source of one script.
const MaxSourceBytes = 512 << 10

// DepsDirEnv tells Main where a script's dependency cache is mounted: it
// checks that the cache is complete and links its packages beside the source.
const DepsDirEnv = "SANDBOXER_DEPS_DIR"

// Driver returns the bash script that runs a source of a language (l). Run it
// as bash -c <driver> sandboxer-script <args...>, with SourceBytesEnv set and
// the source followed by the program's stdin on its stdin. setup, when not
// empty, runs in ScriptDir before the compile step (dependency wiring).
func Driver(l lang.Script, setup string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "D=%s\n", ScriptDir)
	b.WriteString(`mkdir -p "$D" || exit 125
n="${` + SourceBytesEnv + `:?}"; unset ` + SourceBytesEnv + `
head -c "$n" > "$D/` + l.File + `" || exit 125
if [ "$(stat -c %s "$D/` + l.File + `")" != "$n" ]; then echo "sandboxer: the source did not arrive whole" >&2; exit 125; fi
`)
	if setup != "" {
		b.WriteString("( cd \"$D\" && " + setup + " ) || exit 125\n")
	}
	if l.Compiled() {
		b.WriteString(`t0=$(date +%s%3N)
( cd "$D" && ` + l.Compile + ` ) > "$D/.compile.out" 2> "$D/.compile.err" < /dev/null
rc=$?
t1=$(date +%s%3N)
printf '\036sandboxer-compile exit=%d ms=%d stdout=%d stderr=%d\n' "$rc" "$((t1 - t0))" "$(stat -c %s "$D/.compile.out")" "$(stat -c %s "$D/.compile.err")" >&2
cat "$D/.compile.out" "$D/.compile.err" >&2
printf '\036sandboxer-compile-end\n' >&2
rm -f "$D/.compile.out" "$D/.compile.err"
if [ "$rc" -ne 0 ]; then exit "$rc"; fi
`)
	}
	b.WriteString(l.Run + "\n")
	return b.String()
}

// Compile is the compile step's result.
type Compile struct {
	Stdout     string `json:"stdout"`
	Stderr     string `json:"stderr"`
	ExitCode   int    `json:"exit_code"`
	DurationMS int64  `json:"duration_ms"`
}

const (
	headerPrefix = "\x1esandboxer-compile "
	trailer      = "\x1esandboxer-compile-end\n"
)

// MaxHeaderBytes bounds the compile block's header line.
const MaxHeaderBytes = 128

// HeaderSize parses the header at the start of stderr and returns the whole
// block's size, or ok=false when stderr does not start with one (yet).
func HeaderSize(stderr []byte) (header Compile, hdrLen int, blockLen int64, ok bool) {
	if !bytes.HasPrefix(stderr, []byte(headerPrefix)) {
		return Compile{}, 0, 0, false
	}
	nl := bytes.IndexByte(stderr, '\n')
	if nl < 0 || nl > MaxHeaderBytes {
		return Compile{}, 0, 0, false
	}
	var out, errn int64
	for _, f := range strings.Fields(string(stderr[len(headerPrefix):nl])) {
		k, v, _ := strings.Cut(f, "=")
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return Compile{}, 0, 0, false
		}
		switch k {
		case "exit":
			header.ExitCode = int(n)
		case "ms":
			header.DurationMS = n
		case "stdout":
			out = n
		case "stderr":
			errn = n
		}
	}
	hdrLen = nl + 1
	header.Stdout = strconv.FormatInt(out, 10) // sizes, replaced by ParseCompile
	header.Stderr = strconv.FormatInt(errn, 10)
	return header, hdrLen, int64(hdrLen) + out + errn + int64(len(trailer)), true
}

// ParseCompile reads the compile block at the start of stderr (which must
// hold the whole block): the compile result and the block's length.
func ParseCompile(stderr []byte) (Compile, int, bool) {
	h, hdrLen, blockLen, ok := HeaderSize(stderr)
	if !ok || int64(len(stderr)) < blockLen {
		return Compile{}, 0, false
	}
	out, _ := strconv.Atoi(h.Stdout)
	body := stderr[hdrLen : int(blockLen)-len(trailer)]
	if string(stderr[int(blockLen)-len(trailer):blockLen]) != trailer {
		return Compile{}, 0, false
	}
	h.Stdout, h.Stderr = string(body[:out]), string(body[out:])
	return h, int(blockLen), true
}

// CompileFailed says whether stderr starts with the header of a failed
// compile step (only the header line is needed).
func CompileFailed(stderrHead []byte) bool {
	h, _, _, ok := HeaderSize(stderrHead)
	return ok && h.ExitCode != 0
}
