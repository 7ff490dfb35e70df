package workspace

import "testing"

func TestCheckPackage(t *testing.T) {
	good := map[string][]string{
		ManagerApt:   {"jq", "libc6-dev", "g++", "python3.11=3.11.2-6", "jq=1.6-2.1+deb12u1"},
		ManagerNpm:   {"is-number", "@types/node", "@types/node@20.1.0", "lodash@^4.17", "left-pad@latest"},
		ManagerPip:   {"requests", "requests==2.31.0", "Flask_SQLAlchemy", "uvicorn[standard]", "numpy>=1.26"},
		ManagerGo:    {"golang.org/x/tools/cmd/stringer@latest", "github.com/a/b@v1.2.3", "example.com/x"},
		ManagerCargo: {"ripgrep", "serde_json@1.0.100"},
	}
	bad := map[string][]string{
		ManagerApt:   {"", "Jq", "-o=x", "jq; rm -rf /", "../x", "/etc/passwd", "jq=1 2", "a b", "--allow-unauthenticated"},
		ManagerNpm:   {"../x", "-g", "--registry=http://x", "git+https://x/y", "file:/etc", "a b", ".hidden", "x@1.0;id", "http://x/y.tgz"},
		ManagerPip:   {"requests; touch /tmp/x", "--index-url=http://x", "-r /etc/passwd", "-r", "../x", "git+https://x", "x @ http://y", "/tmp/x.whl", "a==1;b"},
		ManagerGo:    {"../x", "-x", "example.com/../x", "example.com/x@v1;id", "x", "./cmd", "example.com/./x"},
		ManagerCargo: {"-x", "../x", "a b", "--git=http://x", "x@latest;id"},
	}
	for mgr, list := range good {
		for _, p := range list {
			if err := CheckPackage(mgr, p); err != nil {
				t.Errorf("%s %q refused: %v", mgr, p, err)
			}
		}
	}
	for mgr, list := range bad {
		for _, p := range list {
			if err := CheckPackage(mgr, p); err == nil {
				t.Errorf("%s %q accepted", mgr, p)
			}
		}
	}
	if err := CheckPackage("brew", "x"); err == nil {
		t.Error("unknown manager accepted")
	}
	for spec, want := range map[string]string{"@types/node@20": "@types/node", "is-number": "is-number", "@types/node": "@types/node"} {
		if got := packageName(ManagerNpm, spec); got != want {
			t.Errorf("packageName(npm, %q) = %q", spec, got)
		}
	}
	if got := packageName(ManagerPip, "uvicorn[standard]==1"); got != "uvicorn" {
		t.Errorf("pip name: %q", got)
	}
}
