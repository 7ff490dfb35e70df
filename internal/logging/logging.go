// Package logging makes the server's logger: zerolog to stderr, never stdout,
// which carries only MCP messages.
package logging

import (
	"fmt"
	"io"
	"log"
	"log/slog"
	"os"
	"strings"

	"github.com/rs/zerolog"
)

// New returns a logger writing to w (stderr in the server) at level.
func New(w io.Writer, level string) (zerolog.Logger, error) {
	lvl, err := zerolog.ParseLevel(strings.ToLower(level))
	if err != nil || level == "" {
		return zerolog.Nop(), fmt.Errorf("log level %q is not one of debug, info, warn, error", level)
	}
	l := zerolog.New(w).Level(lvl).With().Timestamp().Logger()
	// Libraries that use the standard loggers must not write to stdout either.
	log.SetOutput(os.Stderr)
	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, nil)))
	return l, nil
}

// StdLogger adapts the logger for libraries that take a *log.Logger.
func StdLogger(l zerolog.Logger) *log.Logger {
	return log.New(l, "", 0)
}
