package flowtext_test

import (
	"fmt"
	"math/rand"
	"net/netip"
	"strconv"
	"strings"
)

// flowTextGen writes random flow texts in ovs-ofctl's syntax, for the
// differential test against ovs-ofctl (differential_test.go). It is a
// specification of that syntax written from Open vSwitch's documentation
// and behaviour (ovs-fields(7), ovs-actions(7), ovs-ofctl(8)), independent
// of this package's tables: it never calls the parser or the field table,
// so a mistake in either cannot hide itself.
//
// Most texts are valid flows that Open vSwitch installs: every field with
// its prerequisites, actions consistent with the match, numbers in every
// base the context reads (decimal, 0x-hex, 0-octal where ovs-ofctl reads
// C's base 0; decimal with leading zeros where it reads base 10), names in
// every spelling and case ovs-ofctl takes. A few are deliberately outside
// what this package encodes the way ovs-ofctl does: fields without their
// prerequisites (which ovs-ofctl silently drops) and actions and fields
// this package does not model. The parser must refuse those; the test
// counts them by reason.
type flowTextGen struct {
	r *rand.Rand
	// used keeps the tables and priorities of added flows distinct, so
	// that no add replaces another on the switch.
	used map[[2]int]bool
}

// genFlow is one generated flow text.
type genFlow struct {
	text   string
	add    bool   // an add the switch takes from a controller (installed); else a modify, a delete or a recirc_id match
	cookie uint64 // an add's cookie, unique: it finds the flow in a dump
}

// genBeyondProbability is how often a flow carries a field or action the
// parser is expected to refuse, genModifyProbability how often a text is a
// modify or delete; genStrayProbability how often a field
// without its prerequisites. High enough that a few hundred flows hold a
// few dozen of them, low enough that most flows test encodings.
const (
	genBeyondProbability = 0.06
	genStrayProbability  = 0.04
	genModifyProbability = 0.08
)

func newFlowTextGen(seed int64) *flowTextGen {
	return &flowTextGen{r: rand.New(rand.NewSource(seed)), used: map[[2]int]bool{}}
}

// genCtx is what the match of the flow being generated establishes, so
// that further fields and the actions stay consistent with it.
type genCtx struct {
	ethType  int  // -1: not matched
	proto    int  // IP protocol, -1: not matched
	icmpType int  // -1: not matched
	icmpCode int  // -1: not matched
	vlan     bool // the packet has a VLAN header (matched, or pushed by an action)
	vlanDone bool // an 802.1Q match was written (once per flow: its keys edit one TCI)
	vlans    int  // VLAN headers pushed on top of the packet's (at most 2 in all)
	tracked  bool // ct_state matches +trk (and not +inv)
	ctInv    bool // ct_state matches +inv
	ctState  bool // ct_state is matched
	ctValid  bool // ct_state implies a valid connection (so its tuple may be matched)
	fragLate bool // nw_frag matches later fragments, which have no L4 header
	ctProto  bool // ct_nw_proto matched (nonzero)
	table    int
	l3packet bool // packet_type names a non-Ethernet packet
	l4Used   bool // an L4 field is matched (so no later-fragment match may follow)
	// noInstall: the switch would refuse the flow whatever encodes it
	// (a recirc_id match, which only Open vSwitch itself may install; a
	// field without its prerequisites; a field the switch lacks a
	// mapping for), so its text is checked for its bytes only.
	noInstall bool
}

func (c *genCtx) isIP4() bool  { return c.ethType == 0x0800 }
func (c *genCtx) isIP6() bool  { return c.ethType == 0x86dd }
func (c *genCtx) isIP() bool   { return c.isIP4() || c.isIP6() }
func (c *genCtx) isARP() bool  { return c.ethType == 0x0806 || c.ethType == 0x8035 }
func (c *genCtx) isMPLS() bool { return c.ethType == 0x8847 || c.ethType == 0x8848 }
func (c *genCtx) isL4() bool {
	return c.isIP() && !c.fragLate && (c.proto == 6 || c.proto == 17 || c.proto == 132)
}
func (c *genCtx) isICMP4() bool { return c.isIP4() && c.proto == 1 }
func (c *genCtx) isICMP6() bool { return c.isIP6() && c.proto == 58 }

func (g *flowTextGen) chance(p float64) bool { return g.r.Float64() < p }
func (g *flowTextGen) intn(n int) int        { return g.r.Intn(n) }
func (g *flowTextGen) pick(s ...string) string {
	return s[g.r.Intn(len(s))]
}

// bits returns a random value of n bits, biased towards small and
// boundary values.
func (g *flowTextGen) bits(n int) uint64 {
	max := uint64(1)<<n - 1
	if n >= 64 {
		max = ^uint64(0)
	}
	switch g.intn(6) {
	case 0:
		return 0
	case 1:
		return max
	case 2:
		return uint64(g.intn(16)) & max
	default:
		return g.r.Uint64() & max
	}
}

// num0 writes v as ovs-ofctl reads numbers with C's base 0: decimal,
// 0x-hex or 0-prefixed octal.
func (g *flowTextGen) num0(v uint64) string {
	switch g.intn(5) {
	case 0, 1:
		return strconv.FormatUint(v, 10)
	case 2:
		return "0x" + strconv.FormatUint(v, 16)
	case 3:
		return "0X" + strings.ToUpper(strconv.FormatUint(v, 16))
	default:
		return "0" + strconv.FormatUint(v, 8)
	}
}

// num10 writes v in decimal, sometimes with leading zeros (which base-10
// contexts read as decimal, unlike base 0).
func (g *flowTextGen) num10(v uint64) string {
	s := strconv.FormatUint(v, 10)
	if g.chance(0.2) {
		s = strings.Repeat("0", 1+g.intn(2)) + s
	}
	return s
}

// wide writes a value of n bits up to 128: in hex (ovs-ofctl reads values
// above 64 bits in hex only), or in base 0 when it fits in 64 bits.
func (g *flowTextGen) wide(n int) string {
	hi, lo := uint64(0), g.bits(min(n, 64))
	if n > 64 && g.chance(0.5) {
		hi = g.bits(n - 64)
	}
	switch {
	case hi != 0:
		return fmt.Sprintf("0x%x%016x", hi, lo)
	case g.chance(0.3):
		return g.num0(lo)
	default:
		return "0x" + strconv.FormatUint(lo, 16)
	}
}

func (g *flowTextGen) mac() string {
	b := make([]string, 6)
	for i := range b {
		b[i] = fmt.Sprintf("%02x", g.intn(256))
	}
	if g.chance(0.2) {
		b[0] = "01" // multicast
	}
	s := strings.Join(b, ":")
	if g.chance(0.2) {
		s = strings.ToUpper(s)
	}
	return s
}

func (g *flowTextGen) macMasked() string {
	s := g.mac()
	if g.chance(0.3) {
		s += "/" + g.pick("ff:ff:ff:ff:ff:ff", "ff:ff:ff:00:00:00", "01:00:00:00:00:00", "fe:ff:ff:ff:ff:ff", g.mac())
	}
	return s
}

func (g *flowTextGen) ip4() netip.Addr {
	var b [4]byte
	g.r.Read(b[:])
	if g.chance(0.5) {
		b[0] = 10
	}
	return netip.AddrFrom4(b)
}

func (g *flowTextGen) ip6() netip.Addr {
	var b [16]byte
	switch g.intn(3) {
	case 0:
		b[0], b[1], b[15] = 0xfd, 0x00, byte(g.intn(256))
	case 1:
		b[0], b[1] = 0xfe, 0x80
		g.r.Read(b[8:])
	default:
		g.r.Read(b[:])
	}
	return netip.AddrFrom16(b)
}

// ipMasked writes an address, maybe with a prefix length or a mask.
func (g *flowTextGen) ipMasked(v6 bool) string {
	a, bits := g.ip4(), 32
	if v6 {
		a, bits = g.ip6(), 128
	}
	s := a.String()
	switch g.intn(5) {
	case 0:
		s += "/" + strconv.Itoa(g.intn(bits+1))
	case 1:
		s += "/" + g.ipMask(v6)
	}
	return s
}

// ipMask writes a mask as an address: any for IPv4, contiguous for IPv6
// (ovs-ofctl reads no other IPv6 mask, and reads one that starts with a
// digit as a prefix length: those are written as lengths).
func (g *flowTextGen) ipMask(v6 bool) string {
	if !v6 && g.chance(0.5) {
		return g.ip4().String()
	}
	bits := 32
	if v6 {
		bits = 128
	}
	n := g.intn(bits + 1)
	ones := make([]byte, bits/8)
	for i := 0; i < n; i++ {
		ones[i/8] |= 0x80 >> (i % 8)
	}
	m, _ := netip.AddrFromSlice(ones)
	if s := m.String(); !v6 || s[0] < '0' || s[0] > '9' {
		return s
	}
	return strconv.Itoa(n)
}

// intMasked writes an n-bit integer in base 0, maybe with a mask.
func (g *flowTextGen) intMasked(n int, maskable bool) string {
	if n > 64 {
		s := g.wide(n)
		if maskable && g.chance(0.4) {
			m := g.wide(n)
			s += "/" + m
		}
		return s
	}
	s := g.num0(g.bits(n))
	if maskable && g.chance(0.4) {
		s += "/" + g.num0(g.bits(n))
	}
	return s
}

// port writes an OpenFlow port as a match (in_port, actset_output) may
// hold it: decimal (ovs-ofctl reads ports in base 10), OpenFlow 1.0 and
// 1.1 reserved numbers included, or a reserved name in any case.
func (g *flowTextGen) port(names ...string) string {
	if len(names) > 0 && g.chance(0.25) {
		return g.portName(names...)
	}
	switch g.intn(8) {
	case 0:
		return g.num10(uint64(65280 + g.intn(256))) // OpenFlow 1.0 reserved range
	case 1:
		return g.num10(uint64(0xffffff00 + g.intn(0xf8))) // OpenFlow 1.1 reserved range, by number
	default:
		return g.num10(uint64(1 + g.intn(65279)))
	}
}

// outPort writes a port an output may name: an ordinary port, or a
// reserved port by name or by its OpenFlow 1.0 or 1.1 number.
func (g *flowTextGen) outPort(names ...string) string {
	if len(names) > 0 && g.chance(0.25) {
		return g.portName(names...)
	}
	switch g.intn(10) {
	case 0:
		return g.num10(uint64(g.pick2(0xfff8, 0xfffa, 0xfffb, 0xfffc, 0xfffd, 0xfffe)))
	case 1:
		return g.num10(uint64(g.pick2(0xfffffff8, 0xfffffffa, 0xfffffffb, 0xfffffffc, 0xfffffffd, 0xfffffffe)))
	default:
		return g.num10(uint64(1 + g.intn(65279)))
	}
}

func (g *flowTextGen) portName(names ...string) string {
	n := g.pick(names...)
	if g.chance(0.3) {
		n = strings.ToLower(n)
	}
	return n
}

// table writes a table number (base 10; ovs-ofctl reads no hex there).
func (g *flowTextGen) tableNum(lo, hi int) string {
	return g.num10(uint64(lo + g.intn(hi-lo+1)))
}

// flow returns one flow text. i numbers the flow: its cookie is unique.
func (g *flowTextGen) flow(i int) genFlow {
	if g.chance(genModifyProbability) {
		return g.modifyOrDelete()
	}
	c := genCtx{ethType: -1, proto: -1, icmpType: -1, icmpCode: -1}
	var head []string
	cookie := uint64(i+1) | uint64(g.intn(1<<16))<<40
	head = append(head, "cookie="+g.num0(cookie))
	c.table = 0
	if g.chance(0.6) {
		c.table = g.intn(254)
		head = append(head, "table="+g.num10(uint64(c.table)))
	}
	prio := g.priority(c.table)
	if prio != genDefaultPriority || g.chance(0.5) {
		head = append(head, "priority="+g.num0(uint64(prio)))
	}
	if g.chance(0.2) {
		head = append(head, "idle_timeout="+g.num0(uint64(g.intn(1<<16))))
	}
	if g.chance(0.2) {
		head = append(head, "hard_timeout="+g.num0(uint64(g.intn(1<<16))))
	}
	if g.chance(0.1) {
		head = append(head, "importance="+g.num0(uint64(g.intn(1<<16))))
	}
	for _, f := range []string{"send_flow_rem", "check_overlap", "reset_counts", "no_packet_counts", "no_byte_counts"} {
		if g.chance(0.07) {
			head = append(head, f)
		}
	}
	match := g.match(&c)
	acts := g.instructions(&c)
	items := append(head, match...)
	g.r.Shuffle(len(items), func(a, b int) { items[a], items[b] = items[b], items[a] })
	text := g.join(items) + g.pick(" ", ",", ", ") + g.pick("actions=", "actions=", "action=") + acts
	if g.chance(0.05) {
		text = "add " + text
	}
	return genFlow{text: text, add: !c.noInstall, cookie: cookie}
}

// priority returns a priority no other add in the table has.
func (g *flowTextGen) priority(table int) int {
	for {
		p := g.intn(1 << 16)
		if g.chance(0.05) {
			p = genDefaultPriority
		}
		if !g.used[[2]int{table, p}] {
			g.used[[2]int{table, p}] = true
			return p
		}
	}
}

func (g *flowTextGen) join(items []string) string {
	var b strings.Builder
	for i, it := range items {
		if i > 0 {
			b.WriteString(g.pick(",", ", "))
		}
		b.WriteString(it)
	}
	return b.String()
}

// modifyOrDelete returns a modify or delete command (checked for its
// bytes only: it is not installed).
func (g *flowTextGen) modifyOrDelete() genFlow {
	c := genCtx{ethType: -1, proto: -1, icmpType: -1, icmpCode: -1}
	cmd := g.pick("modify", "modify_strict", "delete", "delete_strict")
	isDelete, strict := strings.HasPrefix(cmd, "delete"), strings.HasSuffix(cmd, "_strict")
	var items []string
	switch g.intn(3) {
	case 0:
		items = append(items, "cookie="+g.num0(g.bits(64))+"/"+g.pick("-1", g.num0(g.bits(64))))
	case 1:
		if !isDelete { // a modify may set a cookie; a delete only filters by one
			items = append(items, "cookie="+g.num0(g.bits(64)))
		}
	}
	if g.chance(0.5) {
		c.table = g.intn(254)
		items = append(items, "table="+g.num10(uint64(c.table)))
	}
	// ovs-ofctl takes a priority where it selects flows (strict commands)
	// or sets it (modify), out_port and out_group only for deletes,
	// timeouts and flags only for modifies.
	if strict || !isDelete && g.chance(0.3) {
		items = append(items, "priority="+g.num0(uint64(g.intn(1<<16))))
	}
	if isDelete {
		if g.chance(0.4) {
			items = append(items, "out_port="+g.port("LOCAL", "CONTROLLER", "IN_PORT"))
		}
		if g.chance(0.4) {
			items = append(items, "out_group="+g.pick(g.num10(uint64(1+g.intn(1000))), "ANY", "ALL")) // base 10
		}
	} else {
		if g.chance(0.2) {
			items = append(items, "idle_timeout="+g.num0(uint64(g.intn(1<<16))))
		}
		if g.chance(0.2) {
			items = append(items, g.pick("send_flow_rem", "reset_counts", "no_packet_counts"))
		}
	}
	items = append(items, g.match(&c)...)
	g.r.Shuffle(len(items), func(a, b int) { items[a], items[b] = items[b], items[a] })
	text := cmd + " " + g.join(items)
	if !isDelete {
		text += " actions=" + g.instructions(&c)
	}
	return genFlow{text: text}
}

// protocols are the match's possible protocol contexts: the shortcut,
// eth_type and IP protocol (-1 none).
var genProtocols = []struct {
	short   string
	ethType int
	proto   int
}{
	{"", -1, -1}, {"", -1, -1}, {"ip", 0x0800, -1}, {"ipv4", 0x0800, -1}, {"ipv6", 0x86dd, -1}, {"ip6", 0x86dd, -1},
	{"tcp", 0x0800, 6}, {"udp", 0x0800, 17}, {"sctp", 0x0800, 132}, {"icmp", 0x0800, 1},
	{"tcp6", 0x86dd, 6}, {"udp6", 0x86dd, 17}, {"sctp6", 0x86dd, 132}, {"icmp6", 0x86dd, 58},
	{"arp", 0x0806, -1}, {"rarp", 0x8035, -1}, {"mpls", 0x8847, -1}, {"mplsm", 0x8848, -1},
	{"", 0x0800, 47}, {"", 0x86dd, 47}, {"", 0x88cc, -1},
}

// match returns the match part of a flow as separate items.
func (g *flowTextGen) match(c *genCtx) []string {
	var items []string
	add := func(s ...string) { items = append(items, s...) }
	p := genProtocols[g.intn(len(genProtocols))]
	c.ethType, c.proto = p.ethType, p.proto
	switch {
	case p.short != "" && g.chance(0.8):
		add(p.short)
	case p.ethType >= 0:
		add(g.pick("dl_type", "eth_type") + "=" + g.num0(uint64(p.ethType)))
		if p.proto >= 0 {
			add(g.pick("nw_proto", "ip_proto") + "=" + g.num0(uint64(p.proto)))
		}
	}
	if p.ethType < 0 && g.chance(0.1) {
		// A packet type: Ethernet (the default, which Ethernet fields
		// imply) or an L3 packet, which takes no Ethernet fields.
		if g.chance(0.5) {
			add("packet_type=(0," + g.pick("0", "0x0") + ")")
		} else {
			c.l3packet = true
			add("packet_type=(1," + g.num0(uint64(g.pick2(0x0800, 0x86dd, 0x8847))) + ")")
			return items
		}
	}
	n := g.intn(5)
	for k := 0; k < n; k++ {
		add(g.matchField(c)...)
	}
	if c.isIP() && g.chance(0.6) {
		add(g.ipField(c)...)
	}
	if c.isIP() && g.chance(0.3) {
		add(g.ipField(c)...)
	}
	if c.isARP() && g.chance(0.8) {
		add(g.arpField(c))
	}
	if c.isMPLS() && g.chance(0.8) {
		add(g.mplsField())
	}
	if c.ctValid && g.chance(0.5) {
		add(g.ctTupleFields(c)...)
	}
	if g.chance(genStrayProbability) {
		c.noInstall = true
		add(g.strayField(c))
	}
	if g.chance(genBeyondProbability / 3) {
		// Fields Open vSwitch matches that this package does not model.
		c.noInstall = true // tun_metadata needs a TLV mapping, dp_hash is Open vSwitch's own
		cands := []string{"tun_metadata0=0x5", "dp_hash=0x5/0xff", "tun_flags=+oam", "tun_gbp_id=5", "tun_erspan_ver=1"}
		if c.isMPLS() {
			cands = append(cands, "mpls_ttl=5")
		}
		add(g.pick(cands...))
	}
	return items
}

func (g *flowTextGen) pick2(v ...int) int { return v[g.intn(len(v))] }

// matchField returns a field any flow may match, and what else it needs.
func (g *flowTextGen) matchField(c *genCtx) []string {
	switch g.intn(24) {
	case 0:
		return []string{g.pick("in_port", "in_port", "in_port_oxm") + "=" + g.port("LOCAL", "CONTROLLER")}
	case 1:
		if c.l3packet {
			return nil
		}
		return []string{g.pick("dl_src", "eth_src") + "=" + g.macMasked()}
	case 2:
		if c.l3packet {
			return nil
		}
		return []string{g.pick("dl_dst", "eth_dst") + "=" + g.macMasked()}
	case 3:
		if c.l3packet || c.vlanDone {
			return nil
		}
		c.vlanDone = true
		return g.vlanMatch(c)
	case 4:
		return []string{"metadata=" + g.intMasked(64, true)}
	case 5, 6:
		return []string{g.regMatch()}
	case 7:
		return []string{"pkt_mark=" + g.intMasked(32, true)}
	case 8:
		return []string{g.pick("tun_id", "tunnel_id") + "=" + g.intMasked(64, true)}
	case 9:
		return []string{g.pick("tun_src", "tun_dst") + "=" + g.ipMasked(false)}
	case 10:
		return []string{g.pick("tun_ipv6_src", "tun_ipv6_dst") + "=" + g.ipMasked(true)}
	case 11, 12:
		if c.ctState {
			return nil
		}
		c.ctState = true
		return []string{"ct_state=" + g.ctState(c)}
	case 13:
		return []string{"ct_zone=" + g.num0(g.bits(16))}
	case 14:
		return []string{"ct_mark=" + g.intMasked(32, true)}
	case 15:
		return []string{"ct_label=" + g.intMasked(128, true)}
	case 19:
		return []string{"conj_id=" + g.num0(g.bits(32))}
	case 20:
		return []string{"actset_output=" + g.port("LOCAL", "CONTROLLER", "IN_PORT")}
	case 21:
		// Only Open vSwitch itself may install flows on a recirc_id: such
		// texts are checked for their bytes but not installed.
		c.noInstall = true
		return []string{"recirc_id=" + g.num0(g.bits(32))}
	default:
		return nil
	}
}

// regMatch matches a register, an xreg or an xxreg, whole, masked or by
// subfield.
func (g *flowTextGen) regMatch() string {
	switch g.intn(7) {
	case 0:
		return fmt.Sprintf("xreg%d=%s", g.intn(8), g.intMasked(64, true))
	case 1:
		return fmt.Sprintf("xxreg%d=%s", g.intn(4), g.intMasked(128, true))
	case 2:
		lo := g.intn(32)
		hi := lo + g.intn(32-lo)
		name := g.pick(fmt.Sprintf("reg%d", g.intn(16)), fmt.Sprintf("NXM_NX_REG%d", g.intn(16)))
		return fmt.Sprintf("%s%s=%s", name, g.bitRange(lo, hi), g.num0(g.bits(hi-lo+1)))
	case 3:
		// Bits of another field without prerequisites, by subfield.
		t := []setFieldTarget{{name: "xreg2", nxm: "OXM_OF_PKT_REG2", bits: 64}, {name: "metadata", nxm: "OXM_OF_METADATA", bits: 64},
			{name: "pkt_mark", nxm: "NXM_NX_PKT_MARK", bits: 32}, {name: "tun_id", nxm: "NXM_NX_TUN_ID", bits: 64},
			{name: "ct_mark", nxm: "NXM_NX_CT_MARK", bits: 32}}[g.intn(5)]
		w := 1 + g.intn(t.bits)
		return g.subfield(t, w) + "=" + g.num0(g.bits(w))
	default:
		return fmt.Sprintf("reg%d=%s", g.intn(16), g.intMasked(32, true))
	}
}

// bitRange writes [lo..hi], [lo] or [] for a subfield.
func (g *flowTextGen) bitRange(lo, hi int) string {
	if lo == hi && g.chance(0.5) {
		return fmt.Sprintf("[%d]", lo)
	}
	return fmt.Sprintf("[%d..%d]", lo, hi)
}

func (g *flowTextGen) ctState(c *genCtx) string {
	names := []string{"new", "est", "rel", "rpl", "inv", "trk", "snat", "dnat"}
	g.r.Shuffle(len(names), func(a, b int) { names[a], names[b] = names[b], names[a] })
	k := 1 + g.intn(4)
	chosen := names[:k]
	var v, m uint64
	bit := func(n string) uint64 {
		for i, x := range []string{"new", "est", "rel", "rpl", "inv", "trk", "snat", "dnat"} {
			if x == n {
				return 1 << i
			}
		}
		return 0
	}
	var text string
	switch g.intn(3) {
	case 0: // +a-b
		var b strings.Builder
		for _, n := range chosen {
			sign := g.pick("+", "-")
			if n == "trk" && g.chance(0.7) {
				sign = "+"
			}
			m |= bit(n)
			if sign == "+" {
				v |= bit(n)
			}
			b.WriteString(sign + n)
		}
		text = b.String()
	case 1: // a|b (exact)
		for _, n := range chosen {
			v |= bit(n)
		}
		m = 0xff
		text = strings.Join(chosen, "|")
	default:
		v, m = g.bits(8), g.bits(8)
		text = g.num0(v) + "/" + g.num0(m)
	}
	// Tracked: +trk and -inv. The connection's original tuple (the ct_nw_*
	// fields, resubmit with ct) needs that, or a state only tracked
	// packets have.
	c.tracked = m&v&0x20 != 0 && m&0x10 != 0 && v&0x10 == 0
	c.ctInv = m&v&0x10 != 0
	c.ctValid = c.tracked || m&v&0xcf != 0
	return text
}

// ctTupleFields matches the connection's original tuple.
func (g *flowTextGen) ctTupleFields(c *genCtx) []string {
	var out []string
	for k := 0; k < 1+g.intn(2); k++ {
		// The switch takes the IPv4 tuple in IPv4 flows only, the IPv6
		// tuple in IPv6 flows.
		switch g.intn(3) {
		case 0:
			if c.isIP4() {
				out = append(out, g.pick("ct_nw_src", "ct_nw_dst")+"="+g.ipMasked(false))
			}
		case 1:
			if c.isIP6() {
				out = append(out, g.pick("ct_ipv6_src", "ct_ipv6_dst")+"="+g.ipMasked(true))
			}
		default:
			if !c.ctProto && c.isIP() {
				c.ctProto = true
				out = append(out, "ct_nw_proto="+g.num0(uint64(1+g.intn(255))))
				if g.chance(0.6) {
					out = append(out, g.pick("ct_tp_src", "ct_tp_dst")+"="+g.intMasked(16, true))
				}
			}
		}
	}
	return out
}

// vlanMatch matches 802.1Q in one of ovs-ofctl's spellings.
func (g *flowTextGen) vlanMatch(c *genCtx) []string {
	switch g.intn(7) {
	case 0:
		c.vlan = true
		return []string{"dl_vlan=" + g.num0(uint64(g.intn(4096)))}
	case 1:
		c.vlan = true
		return []string{"dl_vlan=" + g.num0(uint64(g.intn(4096))), g.pick("dl_vlan_pcp", "vlan_pcp") + "=" + g.num0(uint64(g.intn(8)))}
	case 2:
		c.vlan = true
		return []string{g.pick("dl_vlan_pcp", "vlan_pcp") + "=" + g.num0(uint64(g.intn(8)))}
	case 3:
		v := uint64(g.intn(1 << 16))
		if g.chance(0.5) {
			v |= 0x1000
		}
		s := "vlan_tci=" + g.num0(v)
		m := uint64(0xffff)
		if g.chance(0.6) {
			m = uint64(g.pick2(0x1fff, 0x1000, 0xefff, 0x0fff, 0xe000, 0xf000, g.intn(1<<16)))
			s += "/" + g.num0(m)
		}
		c.vlan = v&m&0x1000 != 0
		if m&0xe000 != 0 && !c.vlan {
			// Open vSwitch sends the PCP bits without a VLAN present,
			// which the switch refuses for want of the prerequisite.
			c.noInstall = true
		}
		return []string{s}
	case 4:
		v := uint64(g.intn(1 << 13))
		s := "vlan_vid=" + g.num0(v)
		m := uint64(0x1fff)
		if g.chance(0.5) {
			m = uint64(g.pick2(0x1fff, 0x1000, 0x0fff, g.intn(1<<13)))
			s += "/" + g.num0(m)
		}
		c.vlan = v&m&0x1000 != 0
		return []string{s}
	case 5:
		// Bits of the TCI by subfield: the ID, or the ID and the present
		// bit.
		hi := g.pick2(11, 12)
		v := uint64(g.intn(1 << (hi + 1)))
		c.vlan = hi == 12 && v&0x1000 != 0
		return []string{fmt.Sprintf("%s[0..%d]=%s", g.pick("vlan_tci", "NXM_OF_VLAN_TCI"), hi, g.num0(v))}
	default:
		c.vlan = true
		return []string{"vlan_tci=0x1000/0x1000"}
	}
}

// ipField returns an IP, L4 or ICMP field valid for the flow's protocol.
func (g *flowTextGen) ipField(c *genCtx) []string {
	switch g.intn(12) {
	case 0, 1:
		if c.isIP4() {
			return []string{g.pick("nw_src", "nw_dst", "ip_src", "ip_dst") + "=" + g.ipMasked(false)}
		}
		return []string{g.pick("ipv6_src", "ipv6_dst") + "=" + g.ipMasked(true)}
	case 2:
		if c.isIP6() {
			return []string{"ipv6_label=" + g.intMasked(20, true)}
		}
		return nil
	case 3:
		if c.proto < 0 {
			c.proto = g.pick2(6, 17, 132, 1, 58, 47, 89, 2)
			if c.proto == 1 && c.isIP6() || c.proto == 58 && c.isIP4() {
				c.proto = 47
			}
			return []string{g.pick("nw_proto", "ip_proto") + "=" + g.num0(uint64(c.proto))}
		}
		return nil
	case 4:
		return []string{"nw_tos=" + g.num0(uint64(g.intn(64)<<2))}
	case 5:
		return []string{"ip_dscp=" + g.num0(uint64(g.intn(64)))}
	case 6:
		return []string{g.pick("nw_ecn", "ip_ecn") + "=" + g.num0(uint64(g.intn(4)))}
	case 7:
		return []string{"nw_ttl=" + g.num0(uint64(g.intn(256)))}
	case 8:
		v := g.pick("no", "yes", "first", "later", "not_later")
		if c.l4Used {
			v = g.pick("no", "first", "not_later")
		}
		if v == "yes" || v == "later" {
			c.fragLate = true
		}
		return []string{g.pick("nw_frag", "ip_frag") + "=" + v}
	default:
		return g.l4Field(c)
	}
}

func (g *flowTextGen) l4Field(c *genCtx) []string {
	switch {
	case c.isL4():
		c.l4Used = true
		name := map[int]string{6: "tcp", 17: "udp", 132: "sctp"}[c.proto]
		if c.proto == 6 && g.chance(0.3) {
			return []string{"tcp_flags=" + g.tcpFlags()}
		}
		return []string{g.pick("tp_src", "tp_dst", name+"_src", name+"_dst") + "=" + g.intMasked(16, true)}
	case c.isICMP4() || c.isICMP6():
		v6 := c.isICMP6()
		typeName, codeName := "icmp_type", "icmp_code"
		if v6 && g.chance(0.5) {
			typeName, codeName = "icmpv6_type", "icmpv6_code"
		}
		var out []string
		if c.icmpType < 0 {
			c.icmpType = g.intn(256)
			if v6 && g.chance(0.5) {
				c.icmpType = g.pick2(135, 136)
			}
			out = append(out, typeName+"="+g.num0(uint64(c.icmpType)))
		}
		if c.icmpCode < 0 && g.chance(0.4) {
			c.icmpCode = g.intn(256)
			if g.chance(0.5) {
				c.icmpCode = 0
			}
			out = append(out, codeName+"="+g.num0(uint64(c.icmpCode)))
		}
		if v6 && (c.icmpType == 135 || c.icmpType == 136) && c.icmpCode <= 0 {
			if g.chance(0.6) {
				out = append(out, "nd_target="+g.ipMasked(true))
			}
			if g.chance(0.5) {
				out = append(out, map[int]string{135: "nd_sll", 136: "nd_tll"}[c.icmpType]+"="+g.macMasked())
			}
		}
		return out
	}
	return nil
}

func (g *flowTextGen) tcpFlags() string {
	names := []string{"fin", "syn", "rst", "psh", "ack", "urg", "ece", "cwr", "ns"}
	g.r.Shuffle(len(names), func(a, b int) { names[a], names[b] = names[b], names[a] })
	chosen := names[:1+g.intn(4)]
	switch g.intn(3) {
	case 0:
		var b strings.Builder
		for _, n := range chosen {
			b.WriteString(g.pick("+", "-") + n)
		}
		return b.String()
	case 1:
		return strings.Join(chosen, "|")
	default:
		return g.num0(g.bits(12)) + "/" + g.num0(g.bits(12))
	}
}

func (g *flowTextGen) arpField(c *genCtx) string {
	switch g.intn(5) {
	case 0:
		return "arp_op=" + g.num0(uint64(g.intn(256)))
	case 1:
		return "arp_spa=" + g.ipMasked(false)
	case 2:
		return "arp_tpa=" + g.ipMasked(false)
	case 3:
		return "arp_sha=" + g.macMasked()
	default:
		return "arp_tha=" + g.macMasked()
	}
}

func (g *flowTextGen) mplsField() string {
	switch g.intn(3) {
	case 0:
		return "mpls_label=" + g.num0(g.bits(20))
	case 1:
		return "mpls_tc=" + g.num0(g.bits(3))
	default:
		return "mpls_bos=" + g.num0(g.bits(1))
	}
}

// strayField is a field whose prerequisites the flow lacks: ovs-ofctl drops
// it from the match (or sends it as another field), so the parser must
// refuse it.
func (g *flowTextGen) strayField(c *genCtx) string {
	var cands []string
	if !c.isIP4() {
		cands = append(cands, "nw_src=10.0.0.1", "ip_dst=10.0.0.0/8")
	}
	if !c.isIP6() {
		cands = append(cands, "ipv6_src=fd00::1", "ipv6_label=5")
	}
	if !c.isIP() {
		cands = append(cands, "nw_ttl=5", "nw_tos=8", "nw_proto=6", "nw_frag=first", "ip_dscp=3")
	}
	if !c.isL4() {
		cands = append(cands, "tp_src=80", "tp_dst=0x50/0xfff0")
	}
	if c.proto != 6 {
		cands = append(cands, "tcp_dst=80", "tcp_flags=+syn")
	}
	if c.proto != 17 {
		cands = append(cands, "udp_src=53")
	}
	if !c.isICMP4() && !c.isICMP6() {
		cands = append(cands, "icmp_type=8", "icmp_code=0")
	}
	if !c.isICMP6() {
		cands = append(cands, "icmpv6_type=135")
	}
	if !c.isICMP6() || c.icmpType != 135 && c.icmpType != 136 || c.icmpCode > 0 {
		cands = append(cands, "nd_target=fe80::1")
	}
	if !c.isARP() {
		// Not arp_op: Open vSwitch keeps it where it keeps nw_proto, so in
		// an IP flow it changes the protocol (and the actions' validity).
		cands = append(cands, "arp_spa=10.0.0.1", "arp_sha=00:11:22:33:44:55")
	}
	if !c.isMPLS() {
		cands = append(cands, "mpls_label=5", "mpls_tc=1")
	}
	if !c.ctProto {
		cands = append(cands, "ct_tp_src=80", "ct_nw_proto=0")
	}
	return cands[g.intn(len(cands))]
}

// instructions returns the text after actions=: an action list, then
// maybe clear_actions, write_actions, write_metadata and goto_table.
func (g *flowTextGen) instructions(c *genCtx) string {
	if g.chance(0.05) {
		return g.conjunctions()
	}
	var parts []string
	switch {
	case g.chance(0.03):
		return ""
	case g.chance(0.05):
		parts = append(parts, "drop")
	default:
		parts = append(parts, g.actions(c, 1+g.intn(4), false)...)
	}
	var inst []string
	if g.chance(0.08) {
		inst = append(inst, "clear_actions")
	}
	if g.chance(0.1) {
		inst = append(inst, "write_actions("+strings.Join(g.writeActions(c), ",")+")")
	}
	if g.chance(0.1) {
		s := "write_metadata:" + g.num0(g.bits(64))
		if g.chance(0.5) {
			s = "write_metadata:" + g.maskedInt(64)
		}
		inst = append(inst, s)
	}
	if c.table < 254 && g.chance(0.15) {
		inst = append(inst, "goto_table:"+g.tableNum(c.table+1, 254))
	}
	if len(inst) > 0 && parts[0] == "drop" {
		parts = nil
	}
	return strings.Join(append(parts, inst...), ",")
}

func (g *flowTextGen) conjunctions() string {
	var out []string
	ids := map[uint64]bool{}
	for k := 0; k < 1+g.intn(3); k++ {
		id := g.bits(32)
		if ids[id] {
			continue
		}
		ids[id] = true
		n := 2 + g.intn(63)
		out = append(out, fmt.Sprintf("conjunction(%s,%d/%d)", g.num0(id), 1+g.intn(n), n))
	}
	return strings.Join(out, ",")
}

// writeActions are actions valid in an action set.
func (g *flowTextGen) writeActions(c *genCtx) []string {
	var out []string
	for k := 0; k < 1+g.intn(3); k++ {
		switch g.intn(5) {
		case 0:
			out = append(out, "output:"+g.outPort())
		case 1:
			out = append(out, "group:"+g.num0(uint64(1+g.intn(genGroups))))
		case 2:
			out = append(out, "set_queue:"+g.num0(g.bits(32)))
		case 3:
			out = append(out, g.setField(c, false))
		default:
			if c.isIP() {
				out = append(out, "dec_ttl")
			}
		}
	}
	if len(out) == 0 {
		out = append(out, "output:"+g.outPort())
	}
	return out
}

// genDefaultPriority is the priority ovs-ofctl gives a flow without one.
const genDefaultPriority = 32768

// Groups and meters the switch holds for the flows that use them.
const (
	genGroups = 3
	genMeters = 2
)

// actions returns n actions consistent with the flow; nested is true
// inside clone.
func (g *flowTextGen) actions(c *genCtx, n int, nested bool) []string {
	var out []string
	if !nested && g.chance(0.05) {
		// ovs-ofctl takes a meter only first (where OpenFlow 1.3 has its
		// meter instruction), and not inside clone.
		out = append(out, "meter:"+g.num0(uint64(1+g.intn(genMeters))))
	}
	for k := 0; k < n; k++ {
		if a := g.action(c, nested); a != "" {
			out = append(out, a)
		}
	}
	if g.chance(genBeyondProbability) && !c.l3packet { // most need an Ethernet header
		out = append(out, g.beyondAction(c))
	}
	if len(out) == 0 {
		out = append(out, "output:"+g.outPort())
	}
	return out
}

func (g *flowTextGen) action(c *genCtx, nested bool) string {
	switch g.intn(30) {
	case 0, 1:
		return g.pick("output:", "output:", "") + g.outPort("LOCAL", "IN_PORT", "NORMAL", "FLOOD", "ALL")
	case 2:
		return g.pick("LOCAL", "IN_PORT", "NORMAL", "FLOOD", "ALL", "in_port", "local", "normal")
	case 3:
		switch g.intn(5) {
		case 0:
			return "controller"
		case 1:
			return g.pick("controller:", "CONTROLLER:") + strconv.Itoa(g.intn(1<<16))
		case 2:
			return "controller:0" + strconv.FormatUint(uint64(g.intn(1<<16)), 8)
		case 3:
			return "output:CONTROLLER"
		default:
			return "controller(max_len=" + g.num0(uint64(g.intn(1<<16))) + ")"
		}
	case 4:
		return "group:" + g.num0(uint64(1+g.intn(genGroups)))
	case 5:
		return "set_queue:" + g.num0(g.bits(32))
	case 7:
		if !c.isIP() {
			return ""
		}
		if g.chance(0.5) {
			return "dec_ttl"
		}
		ids := make([]string, 1+g.intn(5))
		for i := range ids {
			ids[i] = g.num10(uint64(g.intn(1 << 16)))
		}
		return "dec_ttl(" + strings.Join(ids, ",") + ")"
	case 8:
		if c.l3packet {
			return ""
		}
		if c.vlan && g.chance(0.5) {
			c.vlan = false
			return g.pick("pop_vlan", "strip_vlan")
		}
		if c.vlans >= 1 {
			return ""
		}
		c.vlan = true
		c.vlans++
		return "push_vlan:" + g.pick("0x8100", "0x88a8", "33024", "0x88A8")
	case 9:
		return g.pick("ct_clear", "exit")
	case 10, 11, 12:
		return g.setField(c, true)
	case 13, 14:
		return g.load(c)
	case 15, 16:
		return g.move(c)
	case 17:
		switch {
		case c.isIP4() && g.chance(0.5):
			return g.pick("mod_nw_src:", "mod_nw_dst:") + g.ip4().String()
		case c.isL4() && g.chance(0.5):
			return g.pick("mod_tp_src:", "mod_tp_dst:") + g.num0(g.bits(16))
		}
		if c.l3packet {
			return ""
		}
		return g.pick("mod_dl_src:", "mod_dl_dst:") + g.mac()
	case 18, 19:
		return g.resubmit(c)
	case 20, 21, 22:
		return g.ct(c)
	case 23:
		return g.note()
	case 24:
		if nested {
			return ""
		}
		inner := *c // the clone's changes (a pushed VLAN) stay inside it
		return "clone(" + strings.Join(g.actions(&inner, 1+g.intn(3), true), ",") + ")"
	case 25, 26:
		return g.learn(c)
	default:
		return "output:" + g.outPort()
	}
}

// setFieldTarget is a field set_field, load and move may write, with the
// flow context it needs and how to write its values.
type setFieldTarget struct {
	name, nxm string
	bits      int
	value     func(g *flowTextGen) string // nil: an integer of bits bits
	maskable  bool
	setOnly   bool // set_field only, not load or move
	ok        func(c *genCtx) bool
}

// maskedValue writes VALUE/MASK for an address field, the value's bits
// inside the mask (the switch refuses others).
func (g *flowTextGen) maskedValue(t setFieldTarget) string {
	if t.bits == 48 {
		v, m := make([]string, 6), make([]string, 6)
		for i := range v {
			mb := byte(g.intn(256))
			v[i], m[i] = fmt.Sprintf("%02x", byte(g.intn(256))&mb), fmt.Sprintf("%02x", mb)
		}
		return strings.Join(v, ":") + "/" + strings.Join(m, ":")
	}
	a := g.ip4()
	if t.bits == 128 {
		a = g.ip6()
	}
	p := netip.PrefixFrom(a, g.intn(t.bits+1)).Masked()
	return p.Addr().String() + "/" + strconv.Itoa(p.Bits())
}

func (c *genCtx) isL4Proto(proto int) bool { return c.isL4() && c.proto == proto }

// setL4 is a set_field target's check for an L4 port: valid in the
// flow's protocol, and a later-fragment match may no longer follow.
func setL4(proto int) func(c *genCtx) bool {
	return func(c *genCtx) bool {
		if !c.isL4Proto(proto) {
			return false
		}
		c.l4Used = true
		return true
	}
}

func always(*genCtx) bool { return true }

var genSetFields = []setFieldTarget{
	{name: "eth_src", nxm: "NXM_OF_ETH_SRC", bits: 48, value: (*flowTextGen).mac, maskable: true, ok: func(c *genCtx) bool { return !c.l3packet }},
	{name: "eth_dst", nxm: "NXM_OF_ETH_DST", bits: 48, value: (*flowTextGen).mac, maskable: true, ok: func(c *genCtx) bool { return !c.l3packet }},
	{name: "reg0", nxm: "NXM_NX_REG0", bits: 32, maskable: true, ok: always},
	{name: "reg5", nxm: "NXM_NX_REG5", bits: 32, maskable: true, ok: always},
	{name: "reg15", nxm: "NXM_NX_REG15", bits: 32, maskable: true, ok: always},
	{name: "xreg3", bits: 64, maskable: true, ok: always},
	{name: "xxreg1", nxm: "NXM_NX_XXREG1", bits: 128, maskable: true, ok: always},
	{name: "metadata", bits: 64, maskable: true, ok: always},
	{name: "pkt_mark", nxm: "NXM_NX_PKT_MARK", bits: 32, maskable: true, ok: always},
	{name: "tun_id", nxm: "NXM_NX_TUN_ID", bits: 64, maskable: true, ok: always},
	{name: "tun_src", nxm: "NXM_NX_TUN_IPV4_SRC", bits: 32, value: func(g *flowTextGen) string { return g.ip4().String() }, ok: always},
	{name: "in_port", nxm: "NXM_OF_IN_PORT", bits: 16, setOnly: true, value: func(g *flowTextGen) string { return g.port("LOCAL") }, ok: always},
	{name: "ip_src", nxm: "NXM_OF_IP_SRC", bits: 32, value: func(g *flowTextGen) string { return g.ip4().String() }, maskable: true, ok: (*genCtx).isIP4},
	{name: "ip_dst", nxm: "NXM_OF_IP_DST", bits: 32, value: func(g *flowTextGen) string { return g.ip4().String() }, maskable: true, ok: (*genCtx).isIP4},
	{name: "ipv6_src", nxm: "NXM_NX_IPV6_SRC", bits: 128, value: func(g *flowTextGen) string { return g.ip6().String() }, maskable: true, ok: (*genCtx).isIP6},
	{name: "ipv6_label", nxm: "NXM_NX_IPV6_LABEL", bits: 20, maskable: true, ok: (*genCtx).isIP6},
	{name: "nw_ttl", nxm: "NXM_NX_IP_TTL", bits: 8, ok: (*genCtx).isIP},
	{name: "nw_ecn", nxm: "NXM_NX_IP_ECN", bits: 2, ok: (*genCtx).isIP},
	{name: "ip_dscp", bits: 6, ok: (*genCtx).isIP},
	{name: "tcp_src", nxm: "NXM_OF_TCP_SRC", bits: 16, maskable: true, ok: setL4(6)},
	{name: "tcp_dst", nxm: "NXM_OF_TCP_DST", bits: 16, maskable: true, ok: setL4(6)},
	{name: "udp_dst", nxm: "NXM_OF_UDP_DST", bits: 16, maskable: true, ok: setL4(17)},
	{name: "sctp_src", bits: 16, maskable: true, ok: setL4(132)},
	{name: "arp_spa", nxm: "NXM_OF_ARP_SPA", bits: 32, value: func(g *flowTextGen) string { return g.ip4().String() }, maskable: true, ok: (*genCtx).isARP},
	{name: "arp_sha", nxm: "NXM_NX_ARP_SHA", bits: 48, value: (*flowTextGen).mac, maskable: true, ok: (*genCtx).isARP},
	// Open vSwitch keeps the ARP opcode in 8 bits: set_field only, to a
	// value below 256.
	{name: "arp_op", nxm: "NXM_OF_ARP_OP", bits: 16, setOnly: true, ok: (*genCtx).isARP,
		value: func(g *flowTextGen) string { return g.num0(uint64(g.intn(256))) }},
	{name: "vlan_pcp", bits: 3, ok: func(c *genCtx) bool { return c.vlan }},
	{name: "mpls_tc", bits: 3, ok: (*genCtx).isMPLS},
}

// setField writes set_field:VALUE[/MASK]->FIELD for a field the flow may
// write.
func (g *flowTextGen) setField(c *genCtx, masks bool) string {
	for {
		t := genSetFields[g.intn(len(genSetFields))]
		if !t.ok(c) {
			continue
		}
		v := g.targetValue(t)
		if masks && t.maskable && g.chance(0.4) {
			if t.value != nil {
				v = g.maskedValue(t)
			} else {
				// A mask must cover the value's bits: use the value's own
				// bits plus some.
				v = g.maskedInt(t.bits)
			}
		}
		return "set_field:" + v + "->" + t.name
	}
}

func (g *flowTextGen) targetValue(t setFieldTarget) string {
	if t.value != nil {
		return t.value(g)
	}
	if t.bits > 64 {
		s := g.wide(t.bits)
		return s
	}
	return g.num0(g.bits(t.bits))
}

// maskedInt writes V/M with V's bits inside M.
func (g *flowTextGen) maskedInt(bits int) string {
	n := min(bits, 64)
	m := g.bits(n)
	v := g.bits(n) & m
	return g.num0(v) + "/" + g.num0(m)
}

// subfield names width bits of a field (all of them when width is the
// field's): NAME[lo..hi], NAME[bit], NAME[] or NAME[0..last], with the NXM
// or the plain name.
func (g *flowTextGen) subfield(t setFieldTarget, width int) string {
	name := t.name
	if t.nxm != "" && g.chance(0.6) {
		name = t.nxm
	}
	if width >= t.bits {
		if g.chance(0.5) {
			return name + "[]"
		}
		return fmt.Sprintf("%s[0..%d]", name, t.bits-1)
	}
	lo := g.intn(t.bits - width + 1)
	return name + g.bitRange(lo, lo+width-1)
}

func (g *flowTextGen) target(c *genCtx, fits func(setFieldTarget) bool) setFieldTarget {
	for {
		t := genSetFields[g.intn(len(genSetFields))]
		if t.ok(c) && (fits == nil || fits(t)) {
			return t
		}
	}
}

func (g *flowTextGen) load(c *genCtx) string {
	t := g.target(c, func(t setFieldTarget) bool { return !t.setOnly })
	w := 1 + g.intn(t.bits)
	if g.chance(0.3) {
		w = t.bits
	}
	return "load:" + g.num0(g.bits(min(w, 64))) + "->" + g.subfield(t, w)
}

// genMoveSources are fields move may read in any flow.
var genMoveSources = []setFieldTarget{
	{name: "in_port", nxm: "NXM_OF_IN_PORT", bits: 16},
	{name: "reg1", nxm: "NXM_NX_REG1", bits: 32},
	{name: "reg7", nxm: "NXM_NX_REG7", bits: 32},
	{name: "xxreg2", nxm: "NXM_NX_XXREG2", bits: 128},
	{name: "metadata", bits: 64},
	{name: "pkt_mark", nxm: "NXM_NX_PKT_MARK", bits: 32},
	{name: "ct_mark", nxm: "NXM_NX_CT_MARK", bits: 32},
	{name: "ct_label", nxm: "NXM_NX_CT_LABEL", bits: 128},
	{name: "ct_zone", nxm: "NXM_NX_CT_ZONE", bits: 16},
	{name: "eth_src", nxm: "NXM_OF_ETH_SRC", bits: 48},
	{name: "tun_id", nxm: "NXM_NX_TUN_ID", bits: 64},
}

func (g *flowTextGen) move(c *genCtx) string {
	src := genMoveSources[g.intn(len(genMoveSources))]
	if src.name == "eth_src" && c.l3packet {
		src = genMoveSources[1]
	}
	dst := g.target(c, func(t setFieldTarget) bool { return !t.setOnly })
	w := 1 + g.intn(min(src.bits, dst.bits))
	return "move:" + g.subfield(src, w) + "->" + g.subfield(dst, w)
}

func (g *flowTextGen) resubmit(c *genCtx) string {
	// A resubmit names a port other than IN_PORT, a table, or both.
	port := func() string {
		for {
			p := g.outPort("LOCAL")
			if n, err := strconv.ParseUint(p, 10, 32); err != nil || n != 0xfff8 && n != 0xfffffff8 {
				return p
			}
		}
	}
	switch g.intn(5) {
	case 0:
		return "resubmit:" + port()
	case 1:
		return "resubmit(," + g.tableNum(0, 254) + ")"
	case 2:
		return "resubmit(" + g.outPort("LOCAL", "IN_PORT") + "," + g.tableNum(0, 254) + ")"
	case 3:
		return "resubmit(" + port() + ",)"
	default:
		if c.ctValid && c.isIP() {
			return "resubmit(," + g.tableNum(0, 254) + ",ct)"
		}
		return "resubmit(," + g.tableNum(0, 254) + ")"
	}
}

func (g *flowTextGen) ct(c *genCtx) string {
	if !c.isIP() || c.ctInv {
		return ""
	}
	var args []string
	commit := g.chance(0.6)
	if commit {
		args = append(args, "commit")
		if g.chance(0.2) {
			args = append(args, "force")
		}
	}
	if g.chance(0.5) {
		args = append(args, "table="+g.tableNum(0, 254))
	}
	switch g.intn(3) {
	case 0:
		args = append(args, "zone="+g.num0(g.bits(16)))
	case 1:
		reg := g.intn(16)
		lo := g.pick2(0, 16)
		args = append(args, fmt.Sprintf("zone=%s[%d..%d]", g.pick(fmt.Sprintf("NXM_NX_REG%d", reg), fmt.Sprintf("reg%d", reg)), lo, lo+15))
	}
	if g.chance(0.5) {
		args = append(args, g.nat(c, commit))
	}
	if commit && !c.ctInv && g.chance(0.4) {
		var ex []string
		for k := 0; k < 1+g.intn(2); k++ {
			switch g.intn(4) {
			case 0:
				ex = append(ex, "set_field:"+g.num0(g.bits(32))+"->ct_mark")
			case 1:
				ex = append(ex, "set_field:"+g.maskedInt(32)+"->ct_mark")
			case 2:
				s := g.wide(128)
				ex = append(ex, "set_field:"+s+"->ct_label")
			default:
				lo := g.intn(32)
				ex = append(ex, fmt.Sprintf("load:%s->NXM_NX_CT_MARK[%d..%d]", g.num0(g.bits(1)), lo, lo))
			}
		}
		args = append(args, "exec("+strings.Join(ex, ",")+")")
	}
	if commit && c.proto == 6 && g.chance(0.2) {
		args = append(args, "alg=ftp")
	}
	if commit && c.proto == 17 && g.chance(0.2) {
		args = append(args, "alg=tftp")
	}
	g.r.Shuffle(len(args), func(a, b int) { args[a], args[b] = args[b], args[a] })
	return "ct(" + strings.Join(args, ",") + ")"
}

func (g *flowTextGen) nat(c *genCtx, commit bool) string {
	if !commit || g.chance(0.2) {
		return "nat"
	}
	dir := g.pick("src", "dst")
	if g.chance(0.15) {
		return "nat(" + dir + ")"
	}
	var addr string
	if c.isIP4() {
		a := g.ip4()
		addr = a.String()
		if g.chance(0.4) {
			addr += "-" + a.Next().Next().String()
		}
		if c.isL4() && g.chance(0.5) {
			p := 1 + g.intn(60000)
			addr += ":" + g.num10(uint64(p))
			if g.chance(0.5) {
				addr += "-" + g.num10(uint64(p+g.intn(1000)))
			}
		}
	} else {
		a := g.ip6()
		lo, hi := a.String(), ""
		if g.chance(0.4) {
			hi = a.Next().Next().String()
		}
		if c.isL4() && g.chance(0.5) {
			addr = "[" + lo + "]"
			if hi != "" {
				addr += "-[" + hi + "]"
			}
			p := 1 + g.intn(60000)
			addr += ":" + g.num10(uint64(p))
		} else {
			addr = lo
			if hi != "" {
				addr += "-" + hi
			}
		}
	}
	parts := []string{dir + "=" + addr}
	for _, f := range []string{"persistent", "hash", "random"} {
		if g.chance(0.2) {
			parts = append(parts, f)
		}
	}
	if strings.Contains(strings.Join(parts, ","), "hash") && strings.Contains(strings.Join(parts, ","), "random") {
		parts = parts[:len(parts)-1]
	}
	return "nat(" + strings.Join(parts, ",") + ")"
}

func (g *flowTextGen) note() string {
	n := g.intn(20)
	b := make([]string, n)
	for i := range b {
		b[i] = fmt.Sprintf("%02x", g.intn(256))
	}
	return "note:" + strings.Join(b, ".")
}

// learn writes a learn action whose specs are valid for this flow: match
// and load sources the flow can read, destinations the learned flow can
// hold.
func (g *flowTextGen) learn(c *genCtx) string {
	var args []string
	if g.chance(0.8) {
		args = append(args, "table="+g.tableNum(0, 254))
	}
	for _, k := range []string{"idle_timeout", "hard_timeout", "fin_idle_timeout", "fin_hard_timeout", "priority"} {
		if g.chance(0.25) {
			args = append(args, k+"="+g.num10(uint64(g.intn(1<<16))))
		}
	}
	if g.chance(0.3) {
		args = append(args, "cookie="+g.num0(g.bits(64)))
	}
	for _, f := range []string{"send_flow_rem", "delete_learned"} {
		if g.chance(0.15) {
			args = append(args, f)
		}
	}
	learnFields := []setFieldTarget{
		{name: "reg1", nxm: "NXM_NX_REG1", bits: 32}, {name: "reg6", nxm: "NXM_NX_REG6", bits: 32},
		{name: "metadata", bits: 64}, {name: "pkt_mark", nxm: "NXM_NX_PKT_MARK", bits: 32},
		{name: "tun_id", nxm: "NXM_NX_TUN_ID", bits: 64}, {name: "in_port", nxm: "NXM_OF_IN_PORT", bits: 16},
	}
	if !c.l3packet {
		learnFields = append(learnFields, setFieldTarget{name: "eth_src", nxm: "NXM_OF_ETH_SRC", bits: 48},
			setFieldTarget{name: "eth_dst", nxm: "NXM_OF_ETH_DST", bits: 48},
			setFieldTarget{name: "vlan_tci", nxm: "NXM_OF_VLAN_TCI", bits: 16})
	}
	lf := func() setFieldTarget { return learnFields[g.intn(len(learnFields))] }
	for k := 0; k < g.intn(4); k++ {
		switch g.intn(6) {
		case 0: // dst[] against the packet's own bits
			t := lf()
			if t.name == "in_port" {
				t = learnFields[0]
			}
			args = append(args, g.subfield(t, 1+g.intn(t.bits)))
		case 1: // dst[...]=src[...]
			d, s := lf(), lf()
			w := 1 + g.intn(min(d.bits, s.bits))
			args = append(args, g.subfield(d, w)+"="+g.subfield(s, w))
		case 2: // dst[...]=immediate, in the field's own syntax when it is whole
			t := lf()
			w := 1 + g.intn(min(t.bits, 64))
			v := g.num0(g.bits(w))
			switch {
			case w == t.bits && t.bits == 48:
				v = g.mac()
			case w == t.bits && t.name == "in_port":
				v = g.port()
			}
			args = append(args, g.subfield(t, w)+"="+v)
		case 3: // field=value
			switch g.intn(3) {
			case 0:
				args = append(args, "reg3="+g.num0(g.bits(32)))
			case 1:
				if !c.l3packet {
					args = append(args, "eth_dst="+g.mac())
					break
				}
				fallthrough
			default:
				args = append(args, "metadata="+g.num0(g.bits(64)))
			}
		case 4: // load
			d := lf()
			if d.name == "in_port" || d.name == "vlan_tci" {
				d = learnFields[0]
			}
			if g.chance(0.5) {
				s := lf()
				w := 1 + g.intn(min(d.bits, s.bits))
				args = append(args, "load:"+g.subfield(s, w)+"->"+g.subfield(d, w))
			} else {
				w := 1 + g.intn(min(d.bits, 64))
				args = append(args, "load:"+g.num0(g.bits(w))+"->"+g.subfield(d, w))
			}
		default: // output to a port held in a field
			args = append(args, "output:"+g.pick("NXM_OF_IN_PORT[]", "NXM_NX_REG1[0..15]", "reg6[16..31]"))
		}
	}
	if c.isIP4() && c.isL4Proto(6) && g.chance(0.5) {
		args = append(args, "eth_type=0x800", "nw_proto=6", g.pick("NXM_OF_TCP_DST[]=NXM_OF_TCP_SRC[]", "tcp_dst[]", "NXM_OF_IP_SRC[]=NXM_OF_IP_DST[]"))
	}
	return "learn(" + strings.Join(args, ",") + ")"
}

// beyondAction is an action Open vSwitch reads that this package does not
// encode: the parser must refuse it.
func (g *flowTextGen) beyondAction(c *genCtx) string {
	cands := []string{
		"multipath(eth_src,50,modulo_n,1,0,NXM_NX_REG0[0..5])",
		"bundle(eth_src,0,hrw,ofport,members:4,8)",
		"bundle_load(eth_src,0,hrw,ofport,NXM_NX_REG0[],members:4,8)",
		"output:NXM_NX_REG0[0..15]",
		"controller(reason=no_match,id=5)",
		"controller(userdata=01.02)",
		"enqueue:1:2",
		"mod_vlan_vid:5",
		"mod_vlan_pcp:3",
		"set_tunnel:0x5",
		"set_tunnel64:0x5",
		"pop_queue",
		"sample(probability=12345,collector_set_id=1,obs_domain_id=2,obs_point_id=3)",
		"learn(table=1,limit=10,NXM_NX_REG0[])",
		"learn(table=1,result_dst=NXM_NX_REG0[0],NXM_NX_REG1[])",
	}
	if c.isL4() && c.proto == 6 {
		cands = append(cands, "fin_timeout(idle_timeout=5)")
	}
	if c.isIP() {
		cands = append(cands, "mod_nw_tos:8", "mod_nw_ecn:1", "mod_nw_ttl:5", "check_pkt_larger(1500)->NXM_NX_REG0[0]")
	}
	if c.isMPLS() {
		cands = append(cands, "dec_mpls_ttl", "set_mpls_ttl:5", "set_mpls_label:5")
	}
	return cands[g.intn(len(cands))]
}
