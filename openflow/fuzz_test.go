package openflow_test

import (
	"bytes"
	"testing"

	"github.com/egressflow/egressflow/openflow"
	"github.com/egressflow/egressflow/openflow/flowtext"
	"github.com/egressflow/egressflow/openflow/internal/oftest"
)

// The decoders must never panic, whatever they are fed, and whatever they
// accept must re-encode, and re-encode stably: decode(encode(m)) encodes
// to the same bytes again.

func FuzzUnmarshalMessage(f *testing.F) {
	for _, g := range goldenMessages(f) {
		f.Add(oftest.MustHex(f, g.hex))
	}
	for _, text := range oftest.GoldenFlows {
		if fm, err := flowtext.ParseFlow(text); err == nil {
			b, _ := openflow.MarshalMessage(1, fm)
			f.Add(b)
			flow := openflow.Flow{Match: fm.Match, Instructions: fm.Instructions, Stats: openflow.Stats{Present: openflow.StatDuration}}
			b, _ = openflow.MarshalMessage(2, &openflow.FlowDescReply{Flows: []openflow.Flow{flow}})
			f.Add(b)
			b, _ = openflow.MarshalMessage(3, &openflow.BundleAdd{BundleID: 1, Message: fm})
			f.Add(b)
		}
	}
	groups := testGroups()
	for i := range groups {
		b, _ := openflow.MarshalMessage(4, groups[i].GroupMod())
		f.Add(b)
	}
	b, _ := openflow.MarshalMessage(5, &openflow.GroupDescReply{Groups: groups})
	f.Add(b)
	b, _ = openflow.MarshalMessage(6, &openflow.GroupMod{Command: openflow.GroupInsertBucket, Type: openflow.GroupTypeSelect, GroupID: 1, CommandBucketID: openflow.BucketFirst, Buckets: groups[0].Buckets})
	f.Add(b)
	f.Fuzz(func(t *testing.T, data []byte) {
		// Flow entries read in place (DumpFlowEntries) must not panic
		// either, and agree with the decoder on what they accept.
		entries, entriesErr := 0, error(nil)
		if len(data) >= openflow.HeaderLen+8 {
			entriesErr = openflow.EachFlowEntryOfBody(data[openflow.HeaderLen+8:], func(e openflow.FlowEntry) error {
				_, _, _ = e.Table(), e.Priority(), e.Cookie()
				_, _ = e.Match(), e.Instructions()
				entries++
				_, err := e.Decode()
				return err
			})
		}
		h, m, err := openflow.UnmarshalMessage(data)
		if err != nil {
			return
		}
		if r, ok := m.(*openflow.FlowDescReply); ok && (entriesErr != nil || entries != len(r.Flows)) {
			t.Fatalf("the decoder read %d flows, the entries %d (%v)", len(r.Flows), entries, entriesErr)
		}
		b, err := openflow.MarshalMessage(h.Xid, m)
		if err != nil {
			t.Fatalf("decoded %T does not re-encode: %v", m, err)
		}
		_, m2, err := openflow.UnmarshalMessage(b)
		if err != nil {
			t.Fatalf("re-encoded %T does not decode: %v\n%x", m, err, b)
		}
		b2, err := openflow.MarshalMessage(h.Xid, m2)
		if err != nil || !bytes.Equal(b, b2) {
			t.Fatalf("unstable encoding of %T (%v):\n%x\n%x", m, err, b, b2)
		}
		// Text forms must not panic either.
		switch x := m2.(type) {
		case *openflow.FlowMod:
			_ = x.String()
		case *openflow.FlowDescReply:
			for i := range x.Flows {
				_ = x.Flows[i].String()
			}
		case *openflow.GroupDescReply:
			for i := range x.Groups {
				_ = x.Groups[i].String()
			}
		case *openflow.Error:
			_ = x.Error()
		}
	})
}
