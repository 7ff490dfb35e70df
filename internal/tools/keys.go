package tools

import (
	"fmt"
	"strings"
)

// keyBytes are the bytes a terminal (xterm, in its default normal cursor-key
// mode) sends for each named key. On a PTY the line discipline turns ctrl_c,
// ctrl_z and ctrl_\ into signals for the foreground process group, and ctrl_d
// at the start of a line into end-of-file.
var keyBytes = map[string]string{
	"ctrl_c":    "\x03",
	"ctrl_d":    "\x04",
	"ctrl_z":    "\x1a",
	"ctrl_l":    "\x0c",
	"tab":       "\t",
	"escape":    "\x1b",
	"up":        "\x1b[A",
	"down":      "\x1b[B",
	"right":     "\x1b[C",
	"left":      "\x1b[D",
	"home":      "\x1b[H",
	"end":       "\x1b[F",
	"enter":     "\r",
	"backspace": "\x7f",
	"page_up":   "\x1b[5~",
	"page_down": "\x1b[6~",
}

// keyNames are the key names in the order the schema lists them.
var keyNames = []string{"ctrl_c", "ctrl_d", "ctrl_z", "ctrl_l", "tab", "escape", "up", "down", "left", "right", "home", "end", "enter", "backspace", "page_up", "page_down"}

// maxKeys bounds the keys of one send_input call.
const maxKeys = 256

// encodeKeys turns key names into the bytes a terminal sends, refusing an
// unknown name by name.
func encodeKeys(keys []string) ([]byte, error) {
	if len(keys) > maxKeys {
		return nil, fmt.Errorf("keys has %d entries; the limit is %d", len(keys), maxKeys)
	}
	var b strings.Builder
	for _, k := range keys {
		seq, ok := keyBytes[k]
		if !ok {
			return nil, fmt.Errorf("key %q is not known; known keys: %s", truncate(k, 32), strings.Join(keyNames, ", "))
		}
		b.WriteString(seq)
	}
	return []byte(b.String()), nil
}
