package openflow

import "sort"

// Hello opens a connection. Versions lists the OpenFlow wire versions the
// sender supports, carried in a version-bitmap element; an empty list sends a
// bare HELLO, whose header version alone is the offer.
type Hello struct {
	Versions []uint8
	// Elements holds hello elements other than the version bitmap,
	// verbatim (each padded to 8 bytes), so they re-encode byte for byte.
	Elements []byte
}

const helloElemVersionBitmap = 1

func (m *Hello) MsgType() MessageType { return TypeHello }

func (m *Hello) AppendBody(b []byte, _ uint32) ([]byte, error) {
	if len(m.Versions) > 0 {
		var max uint8
		for _, v := range m.Versions {
			if v > max {
				max = v
			}
		}
		words := int(max)/32 + 1
		start := len(b)
		b = be.AppendUint16(b, helloElemVersionBitmap)
		b = be.AppendUint16(b, uint16(4+4*words))
		for w := 0; w < words; w++ {
			var bits uint32
			for _, v := range m.Versions {
				if int(v)/32 == w {
					bits |= 1 << (v % 32)
				}
			}
			b = be.AppendUint32(b, bits)
		}
		b = padTo8(b, start)
	}
	return append(b, m.Elements...), nil
}

// Supports reports whether the HELLO offers version v. A HELLO without a
// version bitmap offers only its header version, which the caller must check.
func (m *Hello) Supports(v uint8) bool {
	for _, x := range m.Versions {
		if x == v {
			return true
		}
	}
	return false
}

func decodeHello(b []byte) (Message, error) {
	m := &Hello{}
	for off := 0; off < len(b); {
		if len(b)-off < 4 {
			// OpenFlow 1.0 peers may append arbitrary bytes; keep them.
			m.Elements = append(m.Elements, b[off:]...)
			break
		}
		typ, n := be.Uint16(b[off:]), int(be.Uint16(b[off+2:]))
		if n < 4 || off+n > len(b) {
			return nil, decodeErr("HELLO element", off, "length %d overruns %d-byte body", n, len(b)-off)
		}
		end := off + pad8(n)
		if end > len(b) {
			end = len(b)
		}
		if typ == helloElemVersionBitmap {
			for w := 0; 4+4*w+4 <= n; w++ {
				bits := be.Uint32(b[off+4+4*w:])
				for i := 0; i < 32; i++ {
					if bits&(1<<i) != 0 {
						m.Versions = append(m.Versions, uint8(32*w+i))
					}
				}
			}
		} else {
			m.Elements = append(m.Elements, b[off:end]...)
		}
		off = end
	}
	sort.Slice(m.Versions, func(i, j int) bool { return m.Versions[i] < m.Versions[j] })
	return m, nil
}
