package program

import (
	"io"
	"os"

	"github.com/sandboxer/sandboxer/internal/hardening"
)

// probeMain prints the hardening View of its own process as JSON
// (`sandboxer-supervisor probe`): the hardening suite's reading from inside.
func probeMain(args []string, stdout io.Writer) int {
	if len(args) == 1 && args[0] == hardening.ExitFlag {
		return 0
	}
	wd, err := os.Getwd()
	if err != nil {
		logger.Printf("probe: %v", err)
		return 1
	}
	self, err := os.Executable()
	if err != nil {
		self = "/proc/self/exe"
	}
	_, err = stdout.Write(append(hardening.Read(hardening.OS{Self: self}, wd).Marshal(), '\n'))
	if err != nil {
		return 1
	}
	return 0
}
