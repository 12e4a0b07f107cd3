// Package ofnum holds the number handling that the codec and the flow text
// reader share: big-endian byte strings of any width and their bits, and
// integers written as ovs-ofctl reads them.
package ofnum

import (
	"fmt"
	"math/big"
	"strconv"
)

func BytesUint(v []byte) uint64 {
	var x uint64
	for _, c := range v {
		x = x<<8 | uint64(c)
	}
	return x
}

// ParseUintBytes parses an integer of up to w bytes (w may be 16) as
// ovs-ofctl reads field values: 0x-prefixed hex of any width, otherwise a
// number of up to 64 bits in C's base 0 (see parseCUint).
func ParseUintBytes(s string, w int) ([]byte, error) {
	if isHexPrefixed(s) {
		n, ok := new(big.Int).SetString(s[2:], 16)
		if !ok || !isHexDigits(s[2:]) {
			return nil, fmt.Errorf("bad integer %q", s)
		}
		if n.BitLen() > 8*w {
			return nil, fmt.Errorf("%s does not fit in %d bits", s, 8*w)
		}
		out := make([]byte, w)
		n.FillBytes(out)
		return out, nil
	}
	v, err := ParseCUint(s, min(64, 8*w))
	if err != nil {
		return nil, err
	}
	return UintBytes(v, w), nil
}

func isHexPrefixed(s string) bool { return len(s) > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X') }

func isHexDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if !(s[i] >= '0' && s[i] <= '9' || s[i] >= 'a' && s[i] <= 'f' || s[i] >= 'A' && s[i] <= 'F') {
			return false
		}
	}
	return s != ""
}

func IsDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

// ParseCUint parses an unsigned integer of up to bits bits as C's
// strtoull with base 0 reads it, which is how ovs-ofctl reads most
// numbers: 0x-prefixed hex, 0-prefixed octal ("010" is 8), otherwise
// decimal. It takes no sign, spaces or trailing text, and (unlike Go's
// base 0) no underscores or 0b/0o prefixes.
func ParseCUint(s string, bits int) (uint64, error) {
	var v uint64
	var err error
	switch {
	case isHexPrefixed(s):
		if !isHexDigits(s[2:]) {
			return 0, fmt.Errorf("bad integer %q", s)
		}
		v, err = strconv.ParseUint(s[2:], 16, bits)
	case IsDigits(s) && s[0] == '0':
		v, err = strconv.ParseUint(s, 8, bits)
	case IsDigits(s):
		v, err = strconv.ParseUint(s, 10, bits)
	default:
		return 0, fmt.Errorf("bad integer %q", s)
	}
	if err != nil {
		return 0, fmt.Errorf("bad %d-bit integer %q", bits, s)
	}
	return v, nil
}

// ParseDecimal parses a number in base 10 only, as ovs-ofctl reads
// table and port numbers and NAT ports: leading zeros do not make it
// octal, and hex is refused.
func ParseDecimal(s string, bits int) (uint64, error) {
	if !IsDigits(s) {
		return 0, fmt.Errorf("bad decimal number %q", s)
	}
	v, err := strconv.ParseUint(s, 10, bits)
	if err != nil {
		return 0, fmt.Errorf("bad %d-bit decimal number %q", bits, s)
	}
	return v, nil
}

// GetBit reads bit i (0 = least significant) of a big-endian byte string.
func GetBit(b []byte, i int) bool {
	if i/8 >= len(b) {
		return false
	}
	return b[len(b)-1-i/8]&(1<<(i%8)) != 0
}

func SetBit(b []byte, i int, v bool) {
	if v {
		b[len(b)-1-i/8] |= 1 << (i % 8)
	} else {
		b[len(b)-1-i/8] &^= 1 << (i % 8)
	}
}

func IsZero(b []byte) bool {
	for _, x := range b {
		if x != 0 {
			return false
		}
	}
	return true
}

func IsOnes(b []byte) bool {
	for _, x := range b {
		if x != 0xff {
			return false
		}
	}
	return true
}

func UintBytes(v uint64, w int) []byte {
	var b [16]byte
	for i := 0; i < w && i < 8; i++ {
		b[w-1-i] = byte(v >> (8 * i))
	}
	return b[:w]
}

func SentinelAsZero(v, sentinel uint32) uint32 {
	if v == sentinel {
		return 0
	}
	return v
}
