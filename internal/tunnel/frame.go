// Package tunnel carries TCP connections made inside a sandbox that has no
// network to the server, over the one channel every engine has into a
// sandbox: an exec's stdin and stdout.
//
// Inside the sandbox, `sandboxer-supervisor tunnel -- CMD ARGS...` listens on
// 127.0.0.1 (port 0, the sandbox's own loopback), runs CMD with
// HTTP_PROXY/HTTPS_PROXY (both spellings) pointing there, and turns every
// connection it accepts into a channel of frames on its stdout (to the
// server) and stdin (from the server). The server serves each channel as a
// net.Conn to an HTTP proxy (internal/egress), which decides where it may go.
// CMD's stdout and stderr go raw to the subcommand's stderr.
//
// # Frames
//
// Every frame is a 9-byte header, then its payload:
//
//	type (1 byte) | channel (4 bytes, big endian) | length (4 bytes, big endian) | payload
//
// Types (direction: T = tunnel → server, S = server → tunnel):
//
//	'H' Hello  T    payload = Magic, first frame of the stream, channel 0
//	'O' Open   T    a new connection on a channel id above every earlier one
//	'D' Data   T S  1 to MaxData bytes, within the receiver's credit
//	'C' Credit T S  payload = 4 bytes: the sender read that many more bytes
//	'E' EOF    T S  the sender sends no more data on the channel (half close)
//	'X' Close  T S  the sender is done with the channel; the receiver drops it
//	'Z' End    T    payload = CMD's exit code (4 bytes, signed), last frame
//
// Channel 0 is CMD's stdin: the server sends Data and EOF on it, with the
// same credit, and the tunnel writes them to CMD.
//
// # Flow control
//
// Each side may have at most Window bytes of a channel's data unread by the
// other side: a channel starts with Window of credit each way, Data spends
// it, Credit returns it once the receiver's reader has taken the bytes. A
// reader that never reads stops its own channel only; the frame reader of
// either side never blocks on a channel and never writes, so no channel can
// stall another or deadlock the stream. Memory is bounded by MaxChannels ×
// Window per side. Channel ids are never reused: frames for a channel that
// is gone are dropped. Data beyond the credit, an unknown type, a bad
// length, an Open out of order or past MaxChannels ends the stream.
package tunnel

import (
	"encoding/binary"
	"fmt"
	"io"
)

// Command is the supervisor's subcommand.
const Command = "tunnel"

// ListenFlag, with an address on the sandbox's loopback, makes the
// subcommand listen there; with no command after it, the tunnel only
// forwards connections, until its stdin ends (a job's egress, see
// sandbox.OpenTunnel).
const ListenFlag = "--listen"

// Magic is the payload of Hello (the protocol's version).
const Magic = "sbxtun/1"

// Limits of the protocol.
const (
	MaxData     = 32 << 10  // bytes of one Data frame
	Window      = 256 << 10 // credit of a channel, each way
	MaxChannels = 64        // open channels at once
	headerSize  = 9
)

// Frame types.
const (
	TypeHello  byte = 'H'
	TypeOpen   byte = 'O'
	TypeData   byte = 'D'
	TypeCredit byte = 'C'
	TypeEOF    byte = 'E'
	TypeClose  byte = 'X'
	TypeEnd    byte = 'Z'
)

// Frame is one frame.
type Frame struct {
	Type    byte
	Channel uint32
	Payload []byte
}

// AppendFrame appends f's encoding to b.
func AppendFrame(b []byte, f Frame) []byte {
	b = append(b, f.Type)
	b = binary.BigEndian.AppendUint32(b, f.Channel)
	b = binary.BigEndian.AppendUint32(b, uint32(len(f.Payload)))
	return append(b, f.Payload...)
}

// ReadFrame reads one frame, checking its type and length; buf (at least
// MaxData bytes) holds the payload until the next call.
func ReadFrame(r io.Reader, buf []byte) (Frame, error) {
	var h [headerSize]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return Frame{}, err
	}
	f := Frame{Type: h[0], Channel: binary.BigEndian.Uint32(h[1:5])}
	n := binary.BigEndian.Uint32(h[5:9])
	var want int
	switch f.Type {
	case TypeData:
		if n == 0 || n > MaxData {
			return Frame{}, fmt.Errorf("tunnel frame: a Data frame of %d bytes (1 to %d allowed)", n, MaxData)
		}
		want = int(n)
	case TypeHello:
		want = len(Magic)
	case TypeCredit, TypeEnd:
		want = 4
	case TypeOpen, TypeEOF, TypeClose:
		want = 0
	default:
		return Frame{}, fmt.Errorf("tunnel frame: unknown type %q", f.Type)
	}
	if int(n) != want {
		return Frame{}, fmt.Errorf("tunnel frame: a %q frame of %d bytes (%d expected)", f.Type, n, want)
	}
	f.Payload = buf[:n]
	if _, err := io.ReadFull(r, f.Payload); err != nil {
		return Frame{}, fmt.Errorf("tunnel frame: cut short: %w", io.ErrUnexpectedEOF)
	}
	return f, nil
}

func u32(p []byte) uint32 { return binary.BigEndian.Uint32(p) }

func be32(v uint32) []byte { return binary.BigEndian.AppendUint32(nil, v) }
