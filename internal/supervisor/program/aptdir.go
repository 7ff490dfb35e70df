package program

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
)

// aptDirEnv names the directory where a workspace's apt installs were
// unpacked without root (a runtime whose execs cannot run as root, e.g.
// Kubernetes): once its root/ exists, a job finds the packages' programs,
// libraries and Python modules there, after the image's own.
const aptDirEnv = "SANDBOXER_APT_DIR"

// multiarch is Debian's library directory name for this architecture.
var multiarch = map[string]string{"amd64": "x86_64-linux-gnu", "arm64": "aarch64-linux-gnu"}[runtime.GOARCH]

// withUnpackedApt adds the unpacked packages' directories to env's PATH
// (after the image's), LD_LIBRARY_PATH and PYTHONPATH.
func withUnpackedApt(env []string) []string {
	dir, _ := lookupEnv(env, aptDirEnv)
	if dir == "" {
		return env
	}
	root := filepath.Join(dir, "root")
	if fi, err := os.Stat(root); err != nil || !fi.IsDir() {
		return env
	}
	under := func(dirs ...string) []string {
		out := make([]string, len(dirs))
		for i, d := range dirs {
			out[i] = filepath.Join(root, d)
		}
		return out
	}
	path, ok := lookupEnv(env, "PATH")
	if !ok {
		path = defaultPath
	}
	return overlayEnv(env, []string{
		"PATH=" + joinList(path, under("usr/local/bin", "usr/bin", "bin", "usr/sbin", "sbin")),
		"LD_LIBRARY_PATH=" + joinList(envValue(env, "LD_LIBRARY_PATH"), under("usr/lib/"+multiarch, "lib/"+multiarch, "usr/lib", "lib")),
		"PYTHONPATH=" + joinList(envValue(env, "PYTHONPATH"), under("usr/lib/python3/dist-packages")),
	})
}

// lookupEnv is key's value in env: the last one, as in getenv.
func lookupEnv(env []string, key string) (string, bool) {
	for i := len(env) - 1; i >= 0; i-- {
		if v, ok := strings.CutPrefix(env[i], key+"="); ok {
			return v, true
		}
	}
	return "", false
}

// envValue is key's value in env, "" when unset.
func envValue(env []string, key string) string {
	v, _ := lookupEnv(env, key)
	return v
}

// joinList appends dirs to the colon-separated list.
func joinList(list string, dirs []string) string {
	if list == "" {
		return strings.Join(dirs, ":")
	}
	return list + ":" + strings.Join(dirs, ":")
}
