package openflow

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Byte-level helpers shared by every encoder and decoder in this package.
// Decoders use the length-checked readers below and never index a slice
// without checking its length first.

var be = binary.BigEndian

// errTruncated reports a message or element shorter than its header claims.
var errTruncated = errors.New("truncated")

// DecodeError is returned by every decoder in this package when its input is
// malformed. It names what was being decoded and where.
type DecodeError struct {
	What   string // e.g. "action", "match", "FLOW_MOD"
	Offset int    // byte offset inside the element being decoded, or -1
	Err    error
}

func (e *DecodeError) Error() string {
	if e.Offset >= 0 {
		return fmt.Sprintf("openflow: decode %s at offset %d: %v", e.What, e.Offset, e.Err)
	}
	return fmt.Sprintf("openflow: decode %s: %v", e.What, e.Err)
}

func (e *DecodeError) Unwrap() error { return e.Err }

func decodeErr(what string, off int, format string, args ...any) error {
	return &DecodeError{What: what, Offset: off, Err: fmt.Errorf(format, args...)}
}

// EncodeError is returned when a value cannot be represented on the wire, for
// example a message longer than 65535 bytes.
type EncodeError struct {
	What string
	Err  error
}

func (e *EncodeError) Error() string { return fmt.Sprintf("openflow: encode %s: %v", e.What, e.Err) }

func (e *EncodeError) Unwrap() error { return e.Err }

func encodeErr(what string, format string, args ...any) error {
	return &EncodeError{What: what, Err: fmt.Errorf(format, args...)}
}

func pad8(n int) int { return (n + 7) &^ 7 }

// appendZeros appends n zero bytes.
func appendZeros(b []byte, n int) []byte {
	for ; n >= 8; n -= 8 {
		b = append(b, 0, 0, 0, 0, 0, 0, 0, 0)
	}
	for ; n > 0; n-- {
		b = append(b, 0)
	}
	return b
}

// padTo8 appends zero bytes until len(b)-start is a multiple of 8.
func padTo8(b []byte, start int) []byte {
	return appendZeros(b, pad8(len(b)-start)-(len(b)-start))
}

// putLen16 stores the length of b[start:] as a 16-bit big-endian value at
// b[at:], failing if it does not fit.
func putLen16(b []byte, start, at int, what string) error {
	n := len(b) - start
	if n > 0xffff {
		return encodeErr(what, "length %d exceeds 65535", n)
	}
	be.PutUint16(b[at:], uint16(n))
	return nil
}

func cloneBytes(b []byte) []byte {
	if b == nil {
		return nil
	}
	return append([]byte(nil), b...)
}
