package bfd

import (
	"bytes"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
	"time"
)

// The golden packets are laid out by hand from RFC 5880 section 4.1:
// version (3 bits) and diag (5); state (2) and the P F C A D M flags;
// detect multiplier; length; then five 32-bit words, intervals in
// microseconds.
func TestPacketGolden(t *testing.T) {
	cases := []struct {
		name string
		p    Packet
		hex  string
	}{
		{
			name: "Up, polling, diag 1",
			p: Packet{Diag: DiagControlDetectionExpired, State: Up, Poll: true, DetectMult: 3,
				MyDiscriminator: 0x11223344, YourDiscriminator: 0x55667788,
				DesiredMinTx: 100 * time.Millisecond, RequiredMinRx: 300 * time.Millisecond},
			// 0x21 = version 1 << 5 | diag 1; 0xe0 = Up (3) << 6 | P;
			// 100,000 us = 0x000186a0; 300,000 us = 0x000493e0.
			hex: "21 e0 03 18 11223344 55667788 000186a0 000493e0 00000000",
		},
		{
			name: "Down, first packet, no discriminator of the peer yet",
			p: Packet{State: Down, DetectMult: 5, MyDiscriminator: 1,
				DesiredMinTx: time.Second, RequiredMinRx: time.Microsecond, RequiredMinEchoRx: 50 * time.Millisecond},
			// 0x40 = Down (1) << 6; 1 s = 1,000,000 us = 0x000f4240.
			hex: "20 40 05 18 00000001 00000000 000f4240 00000001 0000c350",
		},
		{
			name: "AdminDown with Final, C and D",
			p: Packet{Diag: DiagAdministrativelyDown, State: AdminDown, Final: true, ControlPlaneIndependent: true, Demand: true,
				DetectMult: 1, MyDiscriminator: 0xffffffff, YourDiscriminator: 7},
			// 0x27 = version 1 << 5 | diag 7; 0x1a = AdminDown (0) | F | C | D.
			hex: "27 1a 01 18 ffffffff 00000007 00000000 00000000 00000000",
		},
	}
	for _, c := range cases {
		want, err := hex.DecodeString(strings.ReplaceAll(c.hex, " ", ""))
		if err != nil {
			t.Fatal(err)
		}
		got := c.p.Append(nil)
		if !bytes.Equal(got, want) {
			t.Errorf("%s: encoded %x, want %x", c.name, got, want)
		}
		back, err := Decode(want)
		if err != nil || back != c.p {
			t.Errorf("%s: decoded %+v, %v; want %+v", c.name, back, err, c.p)
		}
	}
}

func TestDecodeDiscards(t *testing.T) {
	valid := Packet{State: Up, DetectMult: 3, MyDiscriminator: 9, YourDiscriminator: 4,
		DesiredMinTx: time.Millisecond, RequiredMinRx: time.Millisecond}
	mutate := func(f func(b []byte) []byte) []byte { return f(valid.Append(nil)) }
	cases := []struct {
		name string
		b    []byte
		want error
	}{
		{"short datagram", mutate(func(b []byte) []byte { return b[:23] }), ErrLength},
		{"version 0", mutate(func(b []byte) []byte { b[0] &^= 0xe0; return b }), ErrVersion},
		{"version 2", mutate(func(b []byte) []byte { b[0] = b[0]&0x1f | 2<<5; return b }), ErrVersion},
		{"length 23", mutate(func(b []byte) []byte { b[3] = 23; return b }), ErrLength},
		{"length beyond the datagram", mutate(func(b []byte) []byte { b[3] = 25; return b }), ErrLength},
		{"authenticated but length 24", mutate(func(b []byte) []byte { b[1] |= 1 << 2; return b }), ErrLength},
		{"authenticated", mutate(func(b []byte) []byte { b[1] |= 1 << 2; b[3] = 26; return append(b, 1, 2) }), ErrAuthentication},
		{"detect multiplier 0", mutate(func(b []byte) []byte { b[2] = 0; return b }), ErrDetectMult},
		{"multipoint", mutate(func(b []byte) []byte { b[1] |= 1; return b }), ErrMultipoint},
		{"my discriminator 0", mutate(func(b []byte) []byte { copy(b[4:8], []byte{0, 0, 0, 0}); return b }), ErrMyDiscriminator},
		{"your discriminator 0 while Up", mutate(func(b []byte) []byte { copy(b[8:12], []byte{0, 0, 0, 0}); return b }), ErrYourDiscriminator},
		{"your discriminator 0 while Init", mutate(func(b []byte) []byte { copy(b[8:12], []byte{0, 0, 0, 0}); b[1] = b[1]&0x3f | 2<<6; return b }), ErrYourDiscriminator},
	}
	for _, c := range cases {
		if _, err := Decode(c.b); !errors.Is(err, c.want) {
			t.Errorf("%s: Decode(%x) = %v, want %v", c.name, c.b, err, c.want)
		}
	}
	// Your Discriminator 0 is fine while Down or AdminDown, and trailing
	// bytes beyond the length are not part of the packet.
	for _, st := range []State{Down, AdminDown} {
		p := valid
		p.State, p.YourDiscriminator = st, 0
		if back, err := Decode(append(p.Append(nil), 0xde, 0xad)); err != nil || back != p {
			t.Errorf("%v with your discriminator 0: %+v, %v", st, back, err)
		}
	}
}

func TestIntervalsBeyondTheFieldSaturate(t *testing.T) {
	p := Packet{State: Down, DetectMult: 1, MyDiscriminator: 1, DesiredMinTx: 2 * maxInterval, RequiredMinRx: -time.Second}
	back, err := Decode(p.Append(nil))
	if err != nil || back.DesiredMinTx != maxInterval || back.RequiredMinRx != 0 {
		t.Fatalf("decoded %+v, %v: want DesiredMinTx %v and RequiredMinRx 0", back, err, maxInterval)
	}
}

// FuzzDecode: Decode never panics, and what it accepts encodes to bytes
// that decode to the same packet.
func FuzzDecode(f *testing.F) {
	f.Add(Packet{State: Up, DetectMult: 3, MyDiscriminator: 1, YourDiscriminator: 2, DesiredMinTx: time.Second}.appendForSeed())
	f.Add(Packet{State: Down, DetectMult: 1, MyDiscriminator: 1, Poll: true}.appendForSeed())
	f.Add([]byte{0x20, 0x44, 3, 26, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 2})
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := Decode(b)
		if err != nil {
			return
		}
		again, err := Decode(p.Append(nil))
		if err != nil || again != p {
			t.Fatalf("accepted %x as %+v, which re-encodes to %+v, %v", b, p, again, err)
		}
	})
}

func (p Packet) appendForSeed() []byte { return p.Append(nil) }
