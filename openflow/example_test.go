package openflow_test

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"log"
	"net/netip"
	"time"

	"github.com/egressflow/egressflow/openflow"
	"github.com/egressflow/egressflow/openflow/flowtext"
	"github.com/egressflow/egressflow/openflow/ofconn"
)

// Build the SNAT flow egressflow installs and print it as ovs-ofctl would.
func ExampleFlowMod_String() {
	var m openflow.Match
	m.SetUint(openflow.FieldEthType, 0x0800).SetAddr(openflow.FieldIPv4Src, netip.MustParseAddr("10.1.0.5"))
	fm := &openflow.FlowMod{
		Cookie: 0x1, Priority: 100, Match: m,
		Instructions: []openflow.Instruction{openflow.Apply(
			openflow.CT{Flags: openflow.CTCommit, Zone: 5, Actions: []openflow.Action{
				openflow.NAT{Flags: openflow.NATSrc, MinAddr: netip.MustParseAddr("192.0.2.10")}}},
			openflow.Output{Port: 2},
		)},
	}
	fmt.Println(fm)
	// Output:
	// cookie=0x1, priority=100,ip,nw_src=10.1.0.5 actions=ct(commit,zone=5,nat(src=192.0.2.10)),output:2
}

// Parse a line of `ovs-ofctl dump-flows` (statistics are ignored) and
// encode it.
func ExampleParseFlow() {
	fm, err := flowtext.ParseFlow(" cookie=0x5, duration=12.5s, table=1, n_packets=3, n_bytes=180, " +
		"priority=10,ct_state=+est+trk,reg0=0x1/0xff,ip actions=resubmit(,2)")
	if err != nil {
		log.Fatal(err)
	}
	b, err := openflow.MarshalMessage(1, fm)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(fm)
	fmt.Println(len(b), "bytes;", fm.Match.Fields())
	// Output:
	// cookie=0x5, table=1, priority=10,ct_state=+est+trk,ip,reg0=0x1/0xff actions=resubmit(,2)
	// 120 bytes; [eth_type reg0 ct_state]
}

// A deletion of every flow of one owner, by cookie mask.
func ExampleParseFlow_delete() {
	fm, err := flowtext.ParseFlow("delete cookie=0x100/0xff00")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(fm.Command, fm.Table == openflow.TableAll, fm)
	// Output:
	// delete true delete cookie=0x100/0xff00
}

// Encode a Nicira conntrack flush of one zone.
func ExampleMarshalMessage() {
	b, err := openflow.MarshalMessage(7, &openflow.CTFlushZone{Zone: 5})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(hex.EncodeToString(b))
	// Output:
	// 0604001800000007000023200000001d0000000000000005
}

// Errors from the switch decode into readable Go errors.
func ExampleUnmarshalMessage() {
	raw, _ := hex.DecodeString("0601001400000002000200040614000800000009")
	_, msg, err := openflow.UnmarshalMessage(raw)
	if err != nil {
		log.Fatal(err)
	}
	e := msg.(*openflow.Error)
	fmt.Println(e.Name())
	fmt.Println(e)
	fmt.Println(errors.Is(e, &openflow.Error{Type: openflow.ErrBadAction, Code: 4}))
	// Output:
	// OFPBAC_BAD_OUT_PORT
	// openflow: switch rejected the request: OFPBAC_BAD_OUT_PORT (bad_action, code 4) for OFPT_BARRIER_REQUEST xid 0x9
	// true
}

// Matches keep Open vSwitch's canonical form: registers set through any
// view (reg, xreg, xxreg) print and encode the same way.
func ExampleMatch() {
	var m openflow.Match
	m.SetUintMasked(openflow.FieldCTState, uint64(openflow.CTStateTrk|openflow.CTStateEst), uint64(openflow.CTStateTrk|openflow.CTStateEst))
	m.SetUint(openflow.FieldXReg(0), 0x0000000500000007) // reg0=5, reg1=7
	m.SetPrefix(openflow.FieldIPv4Dst, netip.MustParsePrefix("192.0.2.0/24"))
	m.SetUint(openflow.FieldEthType, 0x0800)
	fmt.Println(m.String())
	// Output:
	// ct_state=+est+trk,ip,reg0=0x5,reg1=0x7,nw_dst=192.0.2.0/24
}

// Actions in ovs-ofctl syntax, both ways.
func ExampleParseActionText() {
	acts, err := flowtext.ParseActionText("load:0x1->NXM_NX_REG0[0..3],move:NXM_NX_REG0[0..15]->NXM_NX_CT_MARK[0..15],ct_clear")
	if err != nil {
		log.Fatal(err)
	}
	for _, a := range acts {
		fmt.Printf("%T %v\n", a, a)
	}
	// Output:
	// openflow.SetField set_field:0x1/0xf->reg0
	// openflow.CopyField move:NXM_NX_REG0[0..15]->NXM_NX_CT_MARK[0..15]
	// openflow.CTClear ct_clear
}

// Connect to a bridge, install flows atomically, and replay after the
// switch restarts.
func ExampleDial() {
	ctx := context.Background()
	c, err := ofconn.Dial(ctx, "unix:/var/run/openvswitch/br-ex.mgmt",
		ofconn.WithEchoInterval(5*time.Second), ofconn.WithEchoTimeout(15*time.Second))
	if err != nil {
		log.Fatal(err) // e.g. a *ofconn.VersionError if the bridge lacks OpenFlow15
	}
	defer c.Close()

	desired := func() []openflow.Message {
		fm, _ := flowtext.ParseFlow("cookie=0x100, priority=100,ip,nw_src=10.1.0.5 actions=ct(commit,zone=5,nat(src=192.0.2.10)),output:2")
		return []openflow.Message{
			&openflow.FlowMod{Command: openflow.FlowDelete, Table: openflow.TableAll, Cookie: 0x100, CookieMask: 0xffff},
			fm,
		}
	}
	if err := c.Bundle(ctx, desired()...); err != nil {
		var be *ofconn.BundleError
		if errors.As(err, &be) && len(be.Failed) > 0 {
			log.Printf("flow %d refused: %v", be.Failed[0].Index, be.Failed[0].Err)
		}
		log.Fatal(err)
	}
	go func() {
		for range c.Reconnected() {
			// The switch may have restarted empty: replay everything.
			if err := c.Bundle(ctx, desired()...); err != nil {
				log.Print(err)
			}
		}
	}()
}

// A large transaction held encoded, in one buffer, until it is sent: the
// deletes as they are, then the adds, as one atomic bundle.
func ExampleBatch() {
	var adds openflow.Batch
	for i := range 3 {
		fm, _ := flowtext.ParseFlow(fmt.Sprintf("cookie=0x100, priority=100,ip,nw_src=10.1.0.%d actions=output:2", i+1))
		if err := adds.Add(fm); err != nil {
			log.Fatal(err)
		}
	}
	deletes := openflow.List[*openflow.FlowMod]{{Command: openflow.FlowDelete, Table: openflow.TableAll, Cookie: 0x200, CookieMask: ^uint64(0)}}
	bundle := openflow.Join(deletes, &adds)
	fmt.Println(bundle.Len(), "messages,", adds.Size(), "bytes of adds")
	raw := bundle.At(1).(*openflow.RawMessage)
	back, _ := raw.Decode()
	fmt.Println(back)
	// With a connected client c: err := c.BundleSequence(ctx, bundle)

	// Output:
	// 4 messages, 264 bytes of adds
	// cookie=0x100, priority=100,ip,nw_src=10.1.0.1 actions=output:2
}

// Install a change too large to hold at once as one atomic bundle, sending
// each part as soon as it is computed: the switch holds the parts until
// the commit, which applies all of them or none.
func ExampleClient_BeginBundle() {
	ctx := context.Background()
	c, err := ofconn.Dial(ctx, "unix:/var/run/openvswitch/br-ex.mgmt")
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	tx, err := c.BeginBundle(ctx)
	if err != nil {
		log.Fatal(err)
	}
	var part openflow.Batch
	for block := range 100 {
		for i := range 1000 {
			fm, _ := flowtext.ParseFlow(fmt.Sprintf("cookie=0x100, priority=100,ip,nw_src=10.%d.%d.%d actions=output:2", block, i/256, i%256))
			if err := part.Add(fm); err != nil {
				tx.Discard()
				log.Fatal(err)
			}
		}
		if err := tx.Add(ctx, &part); err != nil { // sent now; part can be reused
			log.Fatal(err) // the transaction is over: the switch discards it
		}
		part.Reset()
	}
	if err := tx.Commit(ctx); err != nil {
		log.Fatal(err) // a *ofconn.BundleError naming any refused flow
	}
}

// Dump the flows of one owner, every multipart part collected.
func ExampleClient_DumpFlows() {
	ctx := context.Background()
	c, err := ofconn.Dial(ctx, "unix:/var/run/openvswitch/br-ex.mgmt")
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	flows, err := c.DumpFlows(ctx, &openflow.FlowDescRequest{Table: openflow.TableAll, Cookie: 0x100, CookieMask: 0xffff})
	if err != nil {
		log.Fatal(err)
	}
	for i := range flows {
		fmt.Println(flows[i].String()) // as ovs-ofctl dump-flows prints it
	}
}

// Count one owner's flows by table as the dump arrives, without holding it.
func ExampleClient_DumpFlowsFunc() {
	ctx := context.Background()
	c, err := ofconn.Dial(ctx, "unix:/var/run/openvswitch/br-ex.mgmt")
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	byTable := map[uint8]int{}
	err = c.DumpFlowsFunc(ctx, &openflow.FlowDescRequest{Table: openflow.TableAll, Cookie: 0x100, CookieMask: 0xffff},
		func(f *openflow.Flow) error {
			byTable[f.Table]++
			return nil
		})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(byTable)
}

// Clear the conntrack state of one connection, then of a whole zone.
func ExampleClient_FlushConntrack() {
	ctx := context.Background()
	c, err := ofconn.Dial(ctx, "unix:/var/run/openvswitch/br-ex.mgmt")
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	err = c.FlushConntrack(ctx, &openflow.CTFlush{Proto: 17, Zone: 5, HasZone: true, Orig: openflow.CTTuple{
		Src: netip.MustParseAddr("10.1.0.5"), Dst: netip.MustParseAddr("198.51.100.7"), SrcPort: 40000, DstPort: 53}})
	if err != nil {
		log.Fatal(err)
	}
	if err := c.FlushConntrackZone(ctx, 5); err != nil {
		log.Fatal(err)
	}
}
