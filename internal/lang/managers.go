package lang

import (
	"fmt"
	"regexp"
	"strings"
)

// Package managers: what a language's Dependencies (run_script's
// dependencies) and Packages (install_packages' auto) name, and what
// install_packages takes by name.
const (
	ManagerApt   = "apt"
	ManagerPip   = "pip"
	ManagerNpm   = "npm"
	ManagerCargo = "cargo"
	ManagerGo    = "go"
)

// Manager is a package manager and the one grammar of a requirement it
// takes, the same for run_script's dependencies and install_packages. No
// requirement may begin with '-', '/' or '.', hold whitespace, a URL, a
// path or a '..' element; the installers take them as arguments after
// "--", never through a shell.
type Manager struct {
	Name string
	// Grammar says what a requirement is, with examples, for messages.
	Grammar string
	pattern *regexp.Regexp
}

// MaxRequirementBytes bounds one requirement (npm's name limit).
const MaxRequirementBytes = 214

var (
	pipVersion = `(===|==|!=|~=|>=|<=|<|>)[A-Za-z0-9.*+!_-]+`
	managers   = []Manager{
		{ManagerApt, "a Debian package name (lowercase letters, digits, '+', '.', '-'), optionally =version, such as jq or jq=1.6-2.1",
			regexp.MustCompile(`^[a-z0-9][a-z0-9+.-]*(=[A-Za-z0-9.+:~-]+)?$`)},
		{ManagerPip, "a pip requirement: a distribution name, optionally [extras] and version specifiers, such as requests, requests==2.31.0 or requests>=2,<3 (no URLs, options, markers or spaces)",
			regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?(\[[A-Za-z0-9._-]+(,[A-Za-z0-9._-]+)*\])?(` + pipVersion + `(,` + pipVersion + `)*)?$`)},
		{ManagerNpm, "an npm package name (optionally @scope/), optionally @version, @range or @tag, such as is-number or @scope/pkg@^1.2.0",
			regexp.MustCompile(`^(@[a-z0-9~][a-z0-9._~-]*/)?[a-z0-9~][a-z0-9._~-]*(@[A-Za-z0-9.^~<>=*+_|-]+)?$`)},
		{ManagerCargo, "a crate name, optionally @version, such as serde or serde@1.0",
			regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_-]{0,63}(@[0-9A-Za-z.^~<>=*+-]+)?$`)},
		{ManagerGo, "a Go module or package path starting with a domain, optionally @version, such as golang.org/x/text@v0.14.0",
			regexp.MustCompile(`^[a-z0-9][a-z0-9-]*(\.[a-z0-9-]+)+(/[A-Za-z0-9_~+-][A-Za-z0-9._~+-]*)*(@[A-Za-z0-9][A-Za-z0-9._+-]*)?$`)},
	}
)

// PackageManager is the manager of that name.
func PackageManager(name string) (Manager, bool) {
	for _, m := range managers {
		if m.Name == name {
			return m, true
		}
	}
	return Manager{}, false
}

// ManagerNames are the package managers, in the order install_packages
// runs them.
func ManagerNames() []string {
	names := make([]string, len(managers))
	for i, m := range managers {
		names[i] = m.Name
	}
	return names
}

// Check says what is wrong with a requirement, if anything, in a sentence
// that begins with the requirement (the caller names the argument).
func (m Manager) Check(req string) error {
	shown := req
	if len(shown) > 64 {
		shown = shown[:64] + "…"
	}
	if len(req) > MaxRequirementBytes {
		return fmt.Errorf("%q is %d bytes; the limit is %d", shown, len(req), MaxRequirementBytes)
	}
	if !m.pattern.MatchString(req) {
		return fmt.Errorf("%q is not valid as a %s requirement: give %s", shown, m.Name, m.Grammar)
	}
	if m.Name != ManagerPip && strings.Contains(req, "..") {
		return fmt.Errorf("%q is not valid as a %s requirement: it may not hold '..'", shown, m.Name)
	}
	return nil
}
