package supervisor

import (
	"github.com/sandboxer/sandboxer/internal/sandbox"
	"github.com/sandboxer/sandboxer/internal/supervisor/proto"
)

// JobSpec is spec's job as the sandbox supervisor takes it: argv,
// environment, files, working directory (defaultCwd when spec has none), stdin and
// terminal. Each runtime adds its kill mode, deadline and rlimits.
func JobSpec(spec sandbox.Spec, defaultCwd string) proto.Spec {
	ps := proto.Spec{Argv: spec.Cmd, Env: spec.Env, InheritEnv: true, Cwd: spec.WorkDir, Stdin: proto.StdinClosed, Files: spec.Files, Collect: spec.Collect,
		Seed: spec.Workspace == ""} // a fresh sandbox starts with its template's files; a workspace got them when made
	if ps.Cwd == "" {
		ps.Cwd = defaultCwd
	}
	if spec.OpenStdin {
		ps.Stdin = proto.StdinPipe
	}
	if spec.TTY != nil {
		ps.TTY = &proto.TTYSpec{Rows: spec.TTY.Rows, Cols: spec.TTY.Cols}
	}
	return ps
}

// JobRlimits are the per-job rlimits the supervisor sets where the engine
// cannot set them on the sandbox itself (a shared workspace, a pod).
func JobRlimits(l sandbox.Limits) map[string]uint64 {
	r := map[string]uint64{}
	if l.OpenFiles > 0 {
		r["nofile"] = uint64(l.OpenFiles)
	}
	if l.FileSizeBytes > 0 {
		r["fsize"] = uint64(l.FileSizeBytes)
	}
	return r
}
