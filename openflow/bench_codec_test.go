package openflow

import (
	"net/netip"
	"testing"
)

// snatFlow builds the flow the benchmarks install: the SNAT shape
// ip,nw_src=X actions=ct(commit,zone=Z,nat(src=LB)),output:N.
func snatFlow(i int, cookie uint64) *FlowMod {
	src := netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)})
	var m Match
	m.SetUint(FieldEthType, 0x0800).SetAddr(FieldIPv4Src, src)
	return &FlowMod{
		Cookie: cookie, Table: 0, Priority: 100, Match: m,
		Instructions: []Instruction{Apply(
			CT{Flags: CTCommit, Zone: uint16(1 + i%4), Actions: []Action{
				NAT{Flags: NATSrc, MinAddr: netip.MustParseAddr("192.0.2.10")}}},
			Output{Port: 2},
		)},
	}
}

// BenchmarkEncodeFlowMod measures encoding one SNAT flow mod into a reused
// buffer: the goal is at most 2 allocations (it makes none).
func BenchmarkEncodeFlowMod(b *testing.B) {
	fm := snatFlow(12345, 0x1)
	buf := make([]byte, 0, 512)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		var err error
		buf, err = AppendMessage(buf[:0], uint32(i), fm)
		if err != nil {
			b.Fatal(err)
		}
	}
	b.SetBytes(int64(len(buf)))
}

// BenchmarkMarshalFlowMod is the same into a fresh buffer (one allocation).
func BenchmarkMarshalFlowMod(b *testing.B) {
	fm := snatFlow(12345, 0x1)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if _, err := MarshalMessage(uint32(i), fm); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkEncodeBundleAdd encodes the BUNDLE_ADD_MESSAGE wrapping a flow
// mod, as a bundle transaction does for every flow.
func BenchmarkEncodeBundleAdd(b *testing.B) {
	add := &BundleAdd{BundleID: 1, Flags: BundleAtomic | BundleOrdered, Message: snatFlow(12345, 0x1)}
	buf := make([]byte, 0, 512)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		buf, _ = AppendMessage(buf[:0], uint32(i), add)
	}
}

func BenchmarkDecodeFlowDescReply(b *testing.B) {
	var flows []Flow
	for i := 0; i < 100; i++ {
		fm := snatFlow(i, 1)
		flows = append(flows, Flow{Priority: fm.Priority, Cookie: 1, Match: fm.Match, Instructions: fm.Instructions,
			Stats: Stats{Present: StatDuration | StatPacketCount | StatByteCount}})
	}
	msg, _ := MarshalMessage(1, &FlowDescReply{Flows: flows})
	b.ReportAllocs()
	b.SetBytes(int64(len(msg)))
	for i := 0; i < b.N; i++ {
		if _, _, err := UnmarshalMessage(msg); err != nil {
			b.Fatal(err)
		}
	}
}

func TestEncodeAllocations(t *testing.T) {
	fm := snatFlow(7, 1)
	buf := make([]byte, 0, 512)
	n := testing.AllocsPerRun(100, func() { buf, _ = AppendMessage(buf[:0], 1, fm) })
	if n > 2 {
		t.Errorf("encoding a flow mod into a reused buffer allocates %v times, want <= 2", n)
	}
	if n := testing.AllocsPerRun(100, func() { _, _ = MarshalMessage(1, fm) }); n > 2 {
		t.Errorf("MarshalMessage allocates %v times, want <= 2", n)
	}
}
