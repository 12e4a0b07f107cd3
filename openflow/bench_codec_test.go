package openflow_test

import (
	"testing"

	"github.com/egressflow/egressflow/openflow"
	"github.com/egressflow/egressflow/openflow/internal/oftest"
)

// BenchmarkEncodeFlowMod measures encoding one SNAT flow mod into a reused
// buffer: the goal is at most 2 allocations (it makes none).
func BenchmarkEncodeFlowMod(b *testing.B) {
	fm := oftest.SNATFlow(12345, 0x1)
	buf := make([]byte, 0, 512)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		var err error
		buf, err = openflow.AppendMessage(buf[:0], uint32(i), fm)
		if err != nil {
			b.Fatal(err)
		}
	}
	b.SetBytes(int64(len(buf)))
}

// BenchmarkMarshalFlowMod is the same into a fresh buffer (one allocation).
func BenchmarkMarshalFlowMod(b *testing.B) {
	fm := oftest.SNATFlow(12345, 0x1)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if _, err := openflow.MarshalMessage(uint32(i), fm); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkEncodeBundleAdd encodes the BUNDLE_ADD_MESSAGE wrapping a flow
// mod, as a bundle transaction does for every flow.
func BenchmarkEncodeBundleAdd(b *testing.B) {
	add := &openflow.BundleAdd{BundleID: 1, Flags: openflow.BundleAtomic | openflow.BundleOrdered, Message: oftest.SNATFlow(12345, 0x1)}
	buf := make([]byte, 0, 512)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		buf, _ = openflow.AppendMessage(buf[:0], uint32(i), add)
	}
}

func BenchmarkDecodeFlowDescReply(b *testing.B) {
	var flows []openflow.Flow
	for i := 0; i < 100; i++ {
		fm := oftest.SNATFlow(i, 1)
		flows = append(flows, openflow.Flow{Priority: fm.Priority, Cookie: 1, Match: fm.Match, Instructions: fm.Instructions,
			Stats: openflow.Stats{Present: openflow.StatDuration | openflow.StatPacketCount | openflow.StatByteCount}})
	}
	msg, _ := openflow.MarshalMessage(1, &openflow.FlowDescReply{Flows: flows})
	b.ReportAllocs()
	b.SetBytes(int64(len(msg)))
	for i := 0; i < b.N; i++ {
		if _, _, err := openflow.UnmarshalMessage(msg); err != nil {
			b.Fatal(err)
		}
	}
}

func TestEncodeAllocations(t *testing.T) {
	fm := oftest.SNATFlow(7, 1)
	buf := make([]byte, 0, 512)
	n := testing.AllocsPerRun(100, func() { buf, _ = openflow.AppendMessage(buf[:0], 1, fm) })
	if n > 2 {
		t.Errorf("encoding a flow mod into a reused buffer allocates %v times, want <= 2", n)
	}
	if n := testing.AllocsPerRun(100, func() { _, _ = openflow.MarshalMessage(1, fm) }); n > 2 {
		t.Errorf("MarshalMessage allocates %v times, want <= 2", n)
	}
}
