// Command sandboxer-supervisor is the main process of every sandboxer job
// container: internal/supervisor/program is all of it.
package main

import "github.com/sandboxer/sandboxer/internal/supervisor/program"

func main() { program.Main() }
