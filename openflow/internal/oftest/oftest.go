// Package oftest holds what the tests of the openflow packages share:
// Open vSwitch's own tools as oracles (ovs-ofctl ofp-print, parse-actions,
// parse-instructions), a fake switch that records the bytes ovs-ofctl
// sends, the golden flow texts, and helpers to reach a real switch.
package oftest

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/egressflow/egressflow/openflow"
	"github.com/egressflow/egressflow/openflow/flowtext"
	"github.com/egressflow/egressflow/openflow/ofconn"
	"github.com/egressflow/egressflow/test/ovstest"
)

// Oracles: Open vSwitch's own tools, run inside the tests, decide whether
// our bytes and text are right. None of them needs a running switch.

// RequireOVSTools fails (never skips) when the Open vSwitch tools are
// missing: CI installs them, and a silently skipped oracle proves nothing.
func RequireOVSTools(t testing.TB) {
	t.Helper()
	if _, err := exec.LookPath("ovs-ofctl"); err != nil {
		t.Fatal("ovs-ofctl not found: install Debian's openvswitch-switch (make test does); the golden tests use it as their oracle")
	}
}

// OfpPrint decodes a whole message with `ovs-ofctl ofp-print`.
func OfpPrint(t testing.TB, msg []byte) string {
	t.Helper()
	RequireOVSTools(t)
	cmd := exec.Command("ovs-ofctl", "ofp-print", hex.EncodeToString(msg))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("ovs-ofctl ofp-print %x: %v\n%s%s", msg, err, out, stderr.Bytes())
	}
	return strings.TrimRight(string(out), "\n")
}

// OvsParseActions decodes OpenFlow 1.5 action bytes with `ovs-ofctl
// parse-actions OpenFlow15` and returns the text after "actions=". It
// fails if Open vSwitch re-encodes the actions to different bytes.
func OvsParseActions(t testing.TB, acts []byte) string {
	return ovsParseList(t, "parse-actions", acts)
}

// OvsParseInstructions is the same for instruction lists.
func OvsParseInstructions(t testing.TB, insts []byte) string {
	return ovsParseList(t, "parse-instructions", insts)
}

func ovsParseList(t testing.TB, cmd string, b []byte) string {
	t.Helper()
	RequireOVSTools(t)
	c := exec.Command("ovs-ofctl", cmd, "OpenFlow15")
	c.Stdin = strings.NewReader(hex.EncodeToString(b) + "\n")
	out, err := c.CombinedOutput()
	if err != nil {
		t.Fatalf("ovs-ofctl %s OpenFlow15 <<< %x: %v\n%s", cmd, b, err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != 1 || !strings.HasPrefix(lines[0], "actions=") {
		t.Fatalf("ovs-ofctl %s %x: unexpected output (Open vSwitch rejected or re-encoded differently):\n%s", cmd, b, out)
	}
	return strings.TrimPrefix(lines[0], "actions=")
}

// FakeSwitch is a minimal OpenFlow 1.5 switch on a unix socket that
// records what ovs-ofctl sends it, so the tests can compare ovs-ofctl's
// encoding of a flow with ours.
type FakeSwitch struct {
	Path   string // the unix socket it listens on
	ln     net.Listener
	mu     sync.Mutex
	msgs   [][]byte
	conns  []net.Conn
	silent bool // stop answering anything, as a hung switch would
}

// SetSilent makes the switch stop (or resume) answering.
func (fs *FakeSwitch) SetSilent(v bool) {
	fs.mu.Lock()
	fs.silent = v
	fs.mu.Unlock()
}

// Push writes a message to every connection.
func (fs *FakeSwitch) Push(msg []byte) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	for _, c := range fs.conns {
		c.Write(msg)
	}
}

// StopListening closes the listening socket: new connections fail, as
// with a switch that went away.
func (fs *FakeSwitch) StopListening() { fs.ln.Close() }

// CloseConns drops every connection, as a restarting switch would.
func (fs *FakeSwitch) CloseConns() {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	for _, c := range fs.conns {
		c.Close()
	}
	fs.conns = nil
}

func (fs *FakeSwitch) isSilent() bool {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return fs.silent
}

// StartFakeSwitch starts a FakeSwitch on a unix socket in a temporary
// directory; the test's cleanup stops it.
func StartFakeSwitch(t testing.TB) *FakeSwitch {
	t.Helper()
	dir, err := os.MkdirTemp("", "offake")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	fs := &FakeSwitch{Path: filepath.Join(dir, "sw.sock")}
	if fs.ln, err = net.Listen("unix", fs.Path); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fs.ln.Close() })
	go fs.serve()
	return fs
}

func (fs *FakeSwitch) serve() {
	for {
		c, err := fs.ln.Accept()
		if err != nil {
			return
		}
		go fs.handle(c)
	}
}

func (fs *FakeSwitch) handle(c net.Conn) {
	defer c.Close()
	fs.mu.Lock()
	fs.conns = append(fs.conns, c)
	fs.mu.Unlock()
	c.Write([]byte{6, 0, 0, 16, 0, 0, 0, 1, 0, 1, 0, 8, 0, 0, 0, 1 << 6})
	for {
		hdr := make([]byte, 8)
		if _, err := io.ReadFull(c, hdr); err != nil {
			return
		}
		n := binary.BigEndian.Uint16(hdr[2:])
		if n < 8 {
			return
		}
		msg := append(hdr, make([]byte, n-8)...)
		if _, err := io.ReadFull(c, msg[8:]); err != nil {
			return
		}
		xid := msg[4:8]
		if fs.isSilent() {
			continue
		}
		switch openflow.MessageType(msg[1]) {
		case openflow.TypeHello:
			continue
		case openflow.TypeEchoRequest:
			r := append([]byte(nil), msg...)
			r[1] = byte(openflow.TypeEchoReply)
			c.Write(r)
			continue
		case openflow.TypeFeaturesRequest:
			c.Write(append([]byte{6, 6, 0, 32, xid[0], xid[1], xid[2], xid[3]}, make([]byte, 24)...))
			continue
		case openflow.TypeBarrierRequest:
			c.Write([]byte{6, byte(openflow.TypeBarrierReply), 0, 8, xid[0], xid[1], xid[2], xid[3]})
		case openflow.TypeBundleControl:
			r := append([]byte(nil), msg...)
			binary.BigEndian.PutUint16(r[12:], binary.BigEndian.Uint16(r[12:])+1)
			c.Write(r)
		case openflow.TypeMultipartRequest:
			// An empty reply of the requested type.
			r := append([]byte(nil), msg[:16]...)
			r[1] = byte(openflow.TypeMultipartReply)
			r[10], r[11] = 0, 0
			binary.BigEndian.PutUint16(r[2:], 16)
			c.Write(r)
		}
		fs.mu.Lock()
		fs.msgs = append(fs.msgs, msg)
		fs.mu.Unlock()
	}
}

// Ofctl runs ovs-ofctl against the fake switch (the word SWITCH in args is
// replaced by its address) and returns the messages it sent, barriers
// excluded.
func (fs *FakeSwitch) Ofctl(t testing.TB, args ...string) [][]byte {
	t.Helper()
	msgs, out, err := fs.TryOfctl(t, args...)
	if err != nil {
		t.Fatalf("ovs-ofctl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return msgs
}

// TryOfctl is Ofctl returning ovs-ofctl's failure (and its output, which
// holds its error or log messages) instead of failing the test.
func (fs *FakeSwitch) TryOfctl(t testing.TB, args ...string) (msgs [][]byte, output []byte, err error) {
	t.Helper()
	RequireOVSTools(t)
	fs.mu.Lock()
	fs.msgs = nil
	fs.mu.Unlock()
	full := []string{"-O", "OpenFlow15", "--no-names", "-t", "10"}
	for _, a := range args {
		if a == "SWITCH" {
			a = "unix:" + fs.Path
		}
		full = append(full, a)
	}
	output, err = exec.Command("ovs-ofctl", full...).CombinedOutput()
	if err != nil {
		return nil, output, err
	}
	// ovs-ofctl waits for the barrier reply, so everything has arrived.
	deadline := time.Now().Add(2 * time.Second)
	for {
		fs.mu.Lock()
		recorded := fs.msgs
		fs.mu.Unlock()
		if len(recorded) > 0 || time.Now().After(deadline) {
			for _, m := range recorded {
				if openflow.MessageType(m[1]) != openflow.TypeBarrierRequest {
					msgs = append(msgs, m)
				}
			}
			return msgs, output, nil
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// OfctlFlowMod returns the FLOW_MOD ovs-ofctl sends for a flow text.
func (fs *FakeSwitch) OfctlFlowMod(t testing.TB, verb, flow string) []byte {
	t.Helper()
	msgs := fs.Ofctl(t, verb, "SWITCH", flow)
	if len(msgs) != 1 || openflow.MessageType(msgs[0][1]) != openflow.TypeFlowMod {
		t.Fatalf("ovs-ofctl %s %q sent %d messages, want one FLOW_MOD: %x", verb, flow, len(msgs), msgs)
	}
	return msgs[0]
}

// SameExceptXid compares two messages ignoring their transaction ids.
func SameExceptXid(a, b []byte) bool {
	if len(a) < 8 || len(b) < 8 {
		return bytes.Equal(a, b)
	}
	return bytes.Equal(a[:4], b[:4]) && bytes.Equal(a[8:], b[8:])
}

// HexDiff shows two messages one above the other, in hex.
func HexDiff(a, b []byte) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "ours   %x\ntheirs %x\n", a, b)
	return sb.String()
}

// MustParseFlow parses a flow text, failing the test on an error.
func MustParseFlow(t testing.TB, s string) *openflow.FlowMod {
	t.Helper()
	fm, err := flowtext.ParseFlow(s)
	if err != nil {
		t.Fatal(err)
	}
	return fm
}

// MustHex decodes hex, spaces ignored, failing the test on an error.
func MustHex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// SNATFlow builds the flow the benchmarks install: the SNAT shape
// ip,nw_src=X actions=ct(commit,zone=Z,nat(src=LB)),output:N.
func SNATFlow(i int, cookie uint64) *openflow.FlowMod {
	src := netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)})
	var m openflow.Match
	m.SetUint(openflow.FieldEthType, 0x0800).SetAddr(openflow.FieldIPv4Src, src)
	return &openflow.FlowMod{
		Cookie: cookie, Table: 0, Priority: 100, Match: m,
		Instructions: []openflow.Instruction{openflow.Apply(
			openflow.CT{Flags: openflow.CTCommit, Zone: uint16(1 + i%4), Actions: []openflow.Action{
				openflow.NAT{Flags: openflow.NATSrc, MinAddr: netip.MustParseAddr("192.0.2.10")}}},
			openflow.Output{Port: 2},
		)},
	}
}

// GoldenFlows covers every match field and action family this package
// models. Each line is a flow in ovs-ofctl's canonical dump syntax; the
// tests check, with Open vSwitch's own tools as the oracle, that
//   - we encode it to exactly the bytes ovs-ofctl add-flow sends,
//   - we decode ovs-ofctl's bytes and re-encode them byte for byte,
//   - our text for it is what ovs-ofctl prints for the same bytes.
var GoldenFlows = []string{
	"priority=100,ip,nw_src=10.1.0.5 actions=ct(commit,zone=5,nat(src=192.0.2.10)),output:2",
	"cookie=0x1234, table=3, priority=10,ip,nw_src=10.0.0.0/8,nw_dst=192.168.0.1/255.255.0.255 actions=drop",
	"priority=0 actions=NORMAL",
	"actions=drop",
	"table=1, priority=90,reg0=0x5,in_port=3 actions=resubmit(,2)",
	"priority=5,in_port=LOCAL actions=IN_PORT",
	// The two halves of a neighbour advertisement responder (EgressIP).
	"priority=190,icmp6,in_port=2,icmp_type=135,nd_target=2001:db8:5::20 actions=move:NXM_OF_ETH_SRC[]->NXM_OF_ETH_DST[],set_field:02:00:00:00:00:aa->eth_src,move:NXM_NX_IPV6_SRC[]->NXM_NX_IPV6_DST[],set_field:2001:db8:5::20->ipv6_src,set_field:255->nw_ttl,set_field:136->icmpv6_type,set_field:1610612736->nd_reserved,set_field:2->nd_options_type,resubmit(,46)",
	"table=46, priority=190,icmp6,icmp_type=136,nd_target=2001:db8:5::20 actions=set_field:02:00:00:00:00:aa->nd_tll,IN_PORT",
	"priority=190,arp,in_port=2,arp_tpa=198.51.100.20,arp_op=1 actions=move:NXM_OF_ETH_SRC[]->NXM_OF_ETH_DST[],set_field:02:00:00:00:00:aa->eth_src,set_field:2->arp_op,move:NXM_NX_ARP_SHA[]->NXM_NX_ARP_THA[],set_field:02:00:00:00:00:aa->arp_sha,move:NXM_OF_ARP_SPA[]->NXM_OF_ARP_TPA[],set_field:198.51.100.20->arp_spa,IN_PORT",
	"priority=6,in_port=1 actions=CONTROLLER:65535",
	"priority=7 actions=CONTROLLER:128",
	"priority=8,dl_src=00:11:22:33:44:55,dl_dst=01:00:00:00:00:00/01:00:00:00:00:00 actions=FLOOD",
	"priority=9,dl_type=0x1234 actions=ALL",
	"priority=11,dl_vlan=5 actions=pop_vlan,output:4",
	"priority=12,dl_vlan=5,dl_vlan_pcp=3 actions=LOCAL",
	"priority=13,vlan_tci=0x1000/0x1000 actions=push_vlan:0x8100,output:1",
	"priority=14,vlan_tci=0x0000/0x1fff actions=drop",
	"tcp,tp_src=80,tp_dst=0x1000/0xf000 actions=output:1",
	"udp,tp_src=53 actions=output:1",
	"sctp,tp_dst=9 actions=output:1",
	"icmp,icmp_type=8,icmp_code=0 actions=output:1",
	"icmp6,icmp_type=135,nd_target=fe80::1 actions=output:1",
	"ipv6,ipv6_src=fd00::/64,ipv6_dst=fd00::1 actions=output:1",
	"ipv6,ipv6_label=0x00005 actions=output:1",
	"ip,nw_tos=32,nw_ecn=1,nw_ttl=5 actions=dec_ttl,output:1",
	"ip actions=dec_ttl(56,89),output:1",
	"ip,nw_frag=first actions=drop",
	"ip,nw_frag=later actions=drop",
	"ip,nw_proto=47 actions=drop",
	"arp,arp_spa=10.0.0.0/24,arp_tpa=10.0.0.1,arp_op=1,arp_sha=00:11:22:33:44:55 actions=NORMAL",
	"tcp,tcp_flags=+syn-ack actions=drop",
	"tcp,tcp_flags=syn|ack actions=drop",
	"pkt_mark=0x5/0xff actions=drop",
	"pkt_mark=0 actions=drop",
	"ct_state=+est+trk,ip actions=drop",
	"ct_state=new|trk,ip actions=drop",
	"ct_state=-trk,ip actions=ct(table=1,zone=7)",
	"ct_zone=5,ct_mark=0x1,ct_label=0x1/0x3 actions=drop",
	"ct_state=+rpl+trk,ct_mark=0/0x1,ip actions=ct(table=2,zone=NXM_NX_REG6[0..15],nat)",
	"ct_state=+est+trk,ct_nw_src=10.0.0.1,ct_nw_dst=10.0.0.0/8,ip actions=drop",
	"ct_state=+est+trk,ct_ipv6_src=fd00::1,ipv6 actions=drop",
	"ct_state=-inv+trk,ct_nw_proto=6,ct_tp_src=80,ct_tp_dst=443,ip actions=drop",
	"reg0=0x1,reg1=0x2,reg2=0x3/0xf,reg15=0xffffffff actions=drop",
	"reg4=0,reg5=0x8 actions=drop",
	"tun_id=0x5,tun_src=1.1.1.1,tun_dst=2.2.2.0/24 actions=drop",
	"metadata=0x5/0xff actions=goto_table:3",
	"conj_id=7,ip actions=drop",
	"ip,nw_src=10.0.0.1 actions=conjunction(10,1/2)",
	"priority=1 actions=resubmit:5",
	"priority=1 actions=resubmit(3,4)",
	"priority=1,ct_state=+est+trk,ip actions=resubmit(,4,ct)",
	"priority=1,ip actions=set_field:0x5->reg0,set_field:0x5/0xff->reg1,set_field:10.0.0.1->ip_src",
	"ip actions=set_field:00:11:22:33:44:55->eth_src,set_field:0x1/0x1->pkt_mark",
	"priority=1 actions=move:NXM_NX_REG0[0..15]->NXM_NX_REG1[16..31],move:NXM_OF_ETH_SRC[]->NXM_OF_ETH_DST[]",
	"tcp actions=ct(commit,force,table=3,zone=5,exec(set_field:0x1->ct_mark,set_field:0x2/0x3->ct_label),alg=ftp)",
	"ip actions=ct(commit,nat(src=10.0.0.1-10.0.0.9:1000-2000,persistent,random))",
	"ip actions=ct(commit,nat(dst=10.0.0.1:80,hash))",
	"ipv6 actions=ct(commit,nat(src=fd00::1-fd00::9))",
	"ipv6 actions=ct(commit,nat(src=[fd00::1]:1000-2000))",
	"ip actions=ct(nat)",
	"ip actions=ct_clear,group:5,set_queue:3",
	"priority=1 actions=note:01.02.03.04.05.06",
	"priority=1 actions=note:aa.bb.cc.dd.ee.ff.00.11.22.00.00.00.00.00",
	"priority=1 actions=clone(output:1,output:2),exit",
	"priority=1 actions=learn(table=10,idle_timeout=30,priority=5,cookie=0x7,NXM_OF_ETH_DST[]=NXM_OF_ETH_SRC[],NXM_OF_VLAN_TCI[0..11],load:NXM_OF_IN_PORT[]->NXM_NX_REG0[0..15],output:NXM_OF_IN_PORT[])",
	"priority=1 actions=learn(table=1,hard_timeout=60,fin_idle_timeout=5,fin_hard_timeout=10,send_flow_rem,delete_learned,eth_type=0x800,NXM_NX_REG1[0..3]=0x5,load:0x1->NXM_NX_REG2[0..7])",
	"priority=1 actions=write_actions(output:1),goto_table:5",
	"priority=1 actions=clear_actions,write_metadata:0x1/0xff",
	"idle_timeout=10, hard_timeout=20, send_flow_rem importance=7, priority=1 actions=drop",
	"priority=1,recirc_id=0x5 actions=drop",
}

// DialSwitch connects a Client to a harness switch.
func DialSwitch(t testing.TB, sw *ovstest.Switch, opts ...ofconn.Option) *ofconn.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := ofconn.Dial(ctx, "unix:"+sw.MgmtSocket, opts...)
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestCtx is a context that ends after d or with the test.
func TestCtx(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// OfctlFlows returns the flow lines of `ovs-ofctl dump-flows ARGS`
// (without the reply header and the leading space), sorted.
func OfctlFlows(t testing.TB, sw *ovstest.Switch, args ...string) []string {
	t.Helper()
	out := sw.Ofctl(t, append([]string{"--no-names", "dump-flows", sw.Bridge}, args...)...)
	var lines []string
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, " ") {
			lines = append(lines, strings.TrimPrefix(l, " "))
		}
	}
	sort.Strings(lines)
	return lines
}

// AsMessages holds flow mods as Messages.
func AsMessages(fms []*openflow.FlowMod) []openflow.Message {
	msgs := make([]openflow.Message, len(fms))
	for i, fm := range fms {
		msgs[i] = fm
	}
	return msgs
}

// LineDiff lists the lines only ovs-ofctl printed and those only we did.
func LineDiff(got, want []string) string {
	var b strings.Builder
	g, w := map[string]bool{}, map[string]bool{}
	for _, l := range got {
		g[l] = true
	}
	for _, l := range want {
		w[l] = true
	}
	for _, l := range got {
		if !w[l] {
			fmt.Fprintf(&b, "- ovs-ofctl: %s\n", l)
		}
	}
	for _, l := range want {
		if !g[l] {
			fmt.Fprintf(&b, "+ ours:      %s\n", l)
		}
	}
	return b.String()
}

// GoldenActions are action lists in ovs-ofctl's canonical syntax. For each,
// `ovs-ofctl parse-actions OpenFlow15` must read our bytes as exactly our
// text and re-encode them to the same bytes.
var GoldenActions = []string{
	"output:1",
	"output:65279",
	"IN_PORT",
	"LOCAL",
	"NORMAL",
	"FLOOD",
	"ALL",
	"CONTROLLER:65535",
	"CONTROLLER:0",
	"controller(pause)",
	"controller(max_len=128,pause)",
	"controller(pause),NORMAL",
	"drop",
	"group:7",
	"set_queue:2",
	"dec_ttl",
	"dec_ttl(0)",
	"dec_ttl(56,89,65535,1,2)",
	"push_vlan:0x8100",
	"pop_vlan",
	"set_field:0x5->reg0",
	"set_field:0x5/0xff->reg3",
	"set_field:0xdeadbeef->pkt_mark",
	"set_field:10.0.0.1->ip_src",
	"set_field:fd00::1->ipv6_dst",
	"set_field:00:11:22:33:44:55->eth_dst",
	"set_field:80->tcp_dst",
	"set_field:0x1->tun_id",
	"set_field:0x5->metadata",
	"set_field:0x1/0x1->xxreg0",
	"set_field:0x1->xreg1",
	"move:NXM_NX_REG0[]->NXM_NX_REG1[]",
	"move:NXM_NX_REG0[0..15]->NXM_NX_REG1[16..31]",
	"move:NXM_NX_CT_MARK[]->NXM_NX_PKT_MARK[]",
	"move:NXM_OF_IP_SRC[]->NXM_NX_REG2[]",
	"move:NXM_NX_XXREG0[0..63]->NXM_NX_XXREG1[64..127]",
	"move:NXM_NX_REG0[5]->NXM_NX_REG1[7]",
	"resubmit(,3)",
	"resubmit:2",
	"resubmit(2,3)",
	"resubmit(,3,ct)",
	"ct(commit)",
	"ct(commit,zone=5,nat(src=10.0.0.1))",
	"ct(commit,force,table=7,zone=NXM_NX_REG0[0..15],nat(dst=10.0.0.1-10.0.0.3:80-90,persistent,hash),exec(set_field:0x1->ct_mark,set_field:0x1/0xff->ct_label),alg=tftp)",
	"ct(table=0,zone=65535,nat)",
	"ct(commit,nat(src=fd00::1))",
	"ct(commit,nat(src=[fd00::1]-[fd00::ff]:1-2))",
	"ct(commit,exec(set_field:0x2->ct_mark))",
	"ct(zone=1,alg=123)",
	"ct_clear",
	"conjunction(1,1/2),conjunction(2,2/2)",
	"note:00.01.02.03.04.05",
	"clone(ct_clear,resubmit(,4))",
	"exit",
	"learn(table=1,NXM_OF_VLAN_TCI[0..11],NXM_OF_ETH_DST[]=NXM_OF_ETH_SRC[],load:NXM_OF_IN_PORT[]->NXM_NX_REG0[0..15])",
	"learn(table=2,idle_timeout=5,cookie=0x1,eth_type=0x800,nw_proto=6,NXM_OF_TCP_DST[]=NXM_OF_TCP_SRC[],load:0xa->NXM_NX_REG1[],output:NXM_NX_REG2[0..15])",
	"ct(commit,zone=5,nat(src=192.0.2.10)),output:2",
}
