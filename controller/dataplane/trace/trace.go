// Package trace interprets OpenFlow tables the way Open vSwitch walks them,
// so that pure tests can ask where a packet ends on a bridge without
// starting one: which flows it hits, table by table, and what leaves the
// bridge, through which port, with which addresses and mark.
//
// # What it owns
//
// The package owns the interpreter and its model of a packet (Packet) and
// of the connection tracker (Conntrack). It knows nothing of egressflow's
// pipeline: it reads []*openflow.FlowMod, whatever rendered them
// (dataplane.Flows, SharedFlows, ColdGuardFlows, a test's hand-written
// table), plus DefaultFlow, the table-0 NORMAL flow every bridge starts
// with.
//
// It models what egressflow's flows use, and refuses the rest: New
// returns an error for a flow with a match field, instruction or action
// it does not model, and Trace for a packet two flows of one priority both
// match (Open vSwitch's choice between them is undefined), so that a
// future flow it cannot model is noticed rather than mis-traced. Modelled:
//
//   - matches on in_port, eth_src, eth_dst, eth_type, ip_src, ip_dst,
//     ipv6_src, ipv6_dst, ip_proto, ip_frag, ip_dscp, TCP, UDP and SCTP
//     ports, ICMP and ICMPv6 type and code, pkt_mark, ct_state, ct_zone,
//     ct_mark, ct_label and reg0..reg15, with masks; a field the packet lacks
//     (ip_src of an IPv6 packet) never matches; an IP fragment's ports and
//     ICMP type and code read as 0, its first fragment's too, as on a
//     bridge whose fragment handling is "normal", and an IPv6 fragment
//     after the first is protocol 44, its Fragment header (Packet.Frag);
//   - apply-actions and goto_table; a table where nothing matches drops;
//   - output to a port, LOCAL, IN_PORT, NORMAL and CONTROLLER (output to
//     the packet's own in_port is skipped, as Open vSwitch does);
//   - set_field, masked or not, of the Ethernet and IP addresses, ip_dscp,
//     pkt_mark and registers;
//   - resubmit(,table);
//   - group: the packet handed to a group ends that path of the trace
//     (Result.Groups); the tracer does not pick a select group's bucket;
//   - ct with a constant zone, commit, recirculation (table=) and nat:
//     nat(src=A) or nat(dst=A) of one address, or nat without a range
//     (undo the translation) on recirculation; exec(set_field) of the
//     connection's ct_mark or ct_label on a commit that does not
//     recirculate (it changes the entry, not the pass).
//
// # Conntrack
//
// A ct action does what Open vSwitch's does: it clears the packet's
// conntrack fields for the actions after it, and its nat rewrites the
// packet that leaves (for a commit with nat(src=A), the source becomes A).
// A ct that recirculates also forks a copy of the packet that resumes in
// its table once the actions of the first pass are done, with the
// ct_state the Conntrack model gives it (by default trk|new: the first
// packet of a new connection, with snat or dnat if the ct translated it),
// its zone, and its nat applied. That is ofproto/trace's model too when
// `--ct-next` gives it the states (its own default has no snat or dnat),
// and the package's cross-check (crosscheck_test.go) holds the tracer to
// ofproto/trace on a real bridge for hundreds of generated packets through
// egressflow's flows and a hand-written table of the rest.
//
// A fragment stays a fragment across a recirculation, as the userspace
// datapath's connection tracker hands on the fragments of a datagram it
// has tracked. The kernel datapath's reassembles them first: to trace
// that, trace the whole datagram (Frag 0).
package trace

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/egressflow/egressflow/openflow"
)

// maxDepth bounds nested table lookups (goto_table and resubmit), as Open
// vSwitch's own limit (64) does: a loop of resubmits fails instead of
// running forever.
const maxDepth = 64

// Tables is a set of flows ready to be traced, by table, each table's
// flows highest priority first.
type Tables struct {
	tables map[uint8][]*flow
}

// flow is one flow with its match read out for fast lookups.
type flow struct {
	mod   *openflow.FlowMod
	conds []cond
}

// cond is one match field: the packet's value under mask must equal value.
type cond struct {
	field       openflow.Field
	value, mask []byte
}

// DefaultFlow is the flow Open vSwitch puts in table 0 of every new
// bridge: priority 0, cookie 0, actions=NORMAL. Add it to the flows of a
// bridge that keeps it (egressflow's do) for the packets no other flow
// of table 0 takes.
func DefaultFlow() *openflow.FlowMod {
	return &openflow.FlowMod{Command: openflow.FlowAdd, Priority: 0,
		Instructions: []openflow.Instruction{openflow.Apply(openflow.Output{Port: openflow.PortNormal})}}
}

// New reads flows (flow additions) into Tables. A later flow with the
// table, priority and match of an earlier one replaces it, as on a switch.
// It returns an error for anything it cannot model (see the package doc).
func New(flows []*openflow.FlowMod) (*Tables, error) {
	t := &Tables{tables: map[uint8][]*flow{}}
	index := map[string]*flow{}
	for _, fm := range flows {
		f, err := read(fm)
		if err != nil {
			return nil, fmt.Errorf("trace: flow %q: %w", fm, err)
		}
		id, err := fm.Match.AppendBinary([]byte{fm.Table, byte(fm.Priority >> 8), byte(fm.Priority)})
		if err != nil {
			return nil, fmt.Errorf("trace: flow %q: %w", fm, err)
		}
		if old := index[string(id)]; old != nil {
			*old = *f
			continue
		}
		index[string(id)] = f
		t.tables[fm.Table] = append(t.tables[fm.Table], f)
	}
	for _, fs := range t.tables {
		slices.SortStableFunc(fs, func(a, b *flow) int { return int(b.mod.Priority) - int(a.mod.Priority) })
	}
	return t, nil
}

// read checks that the tracer models everything fm does and reads its
// match out.
func read(fm *openflow.FlowMod) (*flow, error) {
	if fm.Command != openflow.FlowAdd {
		return nil, fmt.Errorf("command %v: only flow additions are tables' contents", fm.Command)
	}
	if len(fm.Match.Unknown()) > 0 {
		return nil, fmt.Errorf("match field not modelled (oxm %x)", fm.Match.Unknown())
	}
	f := &flow{mod: fm}
	var probe Packet
	for _, field := range fm.Match.Fields() {
		if _, _, err := probe.get(field); err != nil {
			return nil, err
		}
		value, mask, _ := fm.Match.Get(field)
		f.conds = append(f.conds, cond{field: field, value: value, mask: mask})
	}
	for _, in := range fm.Instructions {
		switch in := in.(type) {
		case openflow.ApplyActions:
			if err := checkActions(in.Actions); err != nil {
				return nil, err
			}
		case openflow.GotoTable:
			if in.Table <= fm.Table {
				return nil, fmt.Errorf("goto_table:%d from table %d: a switch only goes forward", in.Table, fm.Table)
			}
		default:
			return nil, fmt.Errorf("instruction %v not modelled", in)
		}
	}
	return f, nil
}

// checkActions returns an error for the first action the tracer does not
// model.
func checkActions(actions []openflow.Action) error {
	for _, a := range actions {
		switch a := a.(type) {
		case openflow.Output:
			if a.Port >= openflow.PortMax && a.Port != openflow.PortLocal && a.Port != openflow.PortNormal &&
				a.Port != openflow.PortController && a.Port != openflow.PortInPort {
				return fmt.Errorf("output to %s not modelled", openflow.PortName(a.Port))
			}
		case openflow.SetField:
			if !settable(a.Field) {
				return fmt.Errorf("action %v: field not modelled", a)
			}
		case openflow.Resubmit:
			if a.Port != 0 || a.CT || a.Table == openflow.TableAll {
				return fmt.Errorf("action %v: only resubmit(,table) is modelled", a)
			}
		case openflow.CT:
			if err := checkCT(a); err != nil {
				return fmt.Errorf("action %v: %w", a, err)
			}
		case openflow.Note, openflow.ControllerPause, openflow.Group:
		default:
			return fmt.Errorf("action %v not modelled", a)
		}
	}
	return nil
}

// checkCT returns an error for a ct action the tracer does not model.
func checkCT(a openflow.CT) error {
	switch {
	case a.Flags&^openflow.CTCommit != 0:
		return errors.New("only the commit flag is modelled")
	case a.ZoneField.Field != openflow.FieldNone:
		return errors.New("a zone from a field is not modelled")
	case a.Alg != 0:
		return errors.New("ALGs are not modelled")
	}
	for _, x := range a.Actions {
		if set, ok := x.(openflow.SetField); ok {
			switch {
			case set.Field != openflow.FieldCTMark && set.Field != openflow.FieldCTLabel:
				return fmt.Errorf("%v inside ct is not modelled", x)
			case a.Flags&openflow.CTCommit == 0 || a.Recirculate:
				return errors.New("setting the connection's mark or label is modelled only on a commit without recirculation, where it does not reach the pass")
			}
			continue
		}
		nat, ok := x.(openflow.NAT)
		if !ok {
			return fmt.Errorf("%v inside ct is not modelled", x)
		}
		dir := nat.Flags & (openflow.NATSrc | openflow.NATDst)
		switch {
		case dir == 0 && !a.Recirculate:
			return errors.New("nat without a range (undoing a translation) is modelled only with recirculation, where the Conntrack model says what it undoes")
		case dir != 0 && a.Flags&openflow.CTCommit == 0:
			return errors.New("nat with a range is modelled only on commit")
		case dir != 0 && (!nat.MinAddr.IsValid() || nat.MinAddr.IsUnspecified() ||
			(nat.MaxAddr.IsValid() && nat.MaxAddr != nat.MinAddr) || (nat.MaxPort != 0 && nat.MaxPort != nat.MinPort)):
			return errors.New("only nat to one address, and at most one port, is modelled")
		}
	}
	return nil
}

// Conntrack is the tracer's model of the connection tracker, consulted
// when a ct action recirculates the packet. The zero value is
// ofproto/trace's default: every packet is the first of a new connection.
type Conntrack struct {
	// States are the ct_state of each recirculation in turn (ofproto/
	// trace's --ct-next options); past its end, or when empty,
	// openflow.CTStateTrk|openflow.CTStateNew, plus CTStateSNAT or
	// CTStateDNAT after a ct whose nat translated the packet (as the
	// datapath marks the first packet of a connection it translated).
	States []uint32
	// Labels are the connection's ct_label at each recirculation in turn;
	// past its end, or when empty, 0 (a connection given none).
	Labels [][16]byte
	// Unnat gives the addresses a packet has once a nat without a range
	// has undone its connection's translation, for a state with
	// CTStateSNAT or CTStateDNAT (ofproto/trace does not simulate this).
	// Nil: such a packet is an error, as the tracer cannot invent the
	// connection's original addresses. Without those flags nothing is
	// undone.
	Unnat func(Packet) Packet
}

// Hit is one table lookup of a packet's path.
type Hit struct {
	Table uint8
	// Flow is the flow the packet matched, nil if none did (the table
	// missed: the lookup did nothing, and a packet that went there by
	// goto_table is dropped).
	Flow *openflow.FlowMod
}

func (h Hit) String() string {
	if h.Flow == nil {
		return fmt.Sprintf("table %d: no match", h.Table)
	}
	return h.Flow.String()
}

// Emit is a packet leaving the bridge's pipeline.
type Emit struct {
	// Port is where it goes: a port number, openflow.PortLocal,
	// openflow.PortController, or openflow.PortNormal (handed to the
	// switch's L2 forwarding, which picks the ports by MAC learning).
	Port uint32
	// Packet is the packet as it leaves: its fields rewritten by the
	// set_field and nat actions before the output.
	Packet Packet
}

// Result is a packet's path through the tables and where it ended.
type Result struct {
	// Hits are the table lookups in order: the first pass, then each
	// recirculation in the order the ct actions forked them, as
	// ofproto/trace lists them.
	Hits []Hit
	// Emits are the packet's outputs in order; none: it was dropped, or
	// paused.
	Emits []Emit
	// Paused: a controller(pause) froze the packet's pass and sent it to
	// the controller, which may resume it later; the outputs are those
	// before the pause.
	Paused bool
	// Groups are the groups the packet was handed to, in order, as it was
	// then. The tracer knows no group's buckets: what a group does with
	// the packet (a select group's pick) is beyond the trace.
	Groups []Handed
}

// Handed is a packet given to a group.
type Handed struct {
	Group  uint32
	Packet Packet
}

// errPaused ends a pass at a controller(pause).
var errPaused = errors.New("paused")

// Dropped reports whether the packet left through no port, was handed to
// no group and was not paused for the controller.
func (r Result) Dropped() bool { return len(r.Emits) == 0 && len(r.Groups) == 0 && !r.Paused }

// String writes the path, one flow hit per line, then the outputs.
func (r Result) String() string {
	var b strings.Builder
	for _, h := range r.Hits {
		fmt.Fprintf(&b, "  %v\n", h)
	}
	if r.Dropped() {
		b.WriteString("  => drop\n")
	}
	if r.Paused {
		b.WriteString("  => paused, sent to the controller\n")
	}
	for _, e := range r.Emits {
		fmt.Fprintf(&b, "  => %s: %v\n", openflow.PortName(e.Port), e.Packet)
	}
	for _, g := range r.Groups {
		fmt.Fprintf(&b, "  => group:%d: %v\n", g.Group, g.Packet)
	}
	return b.String()
}

// Trace walks p through the tables from table 0, with ct the model of the
// connection tracker, and returns its path and outputs.
func (t *Tables) Trace(p Packet, ct Conntrack) (Result, error) {
	r := &run{tables: t, ct: ct}
	r.queue = append(r.queue, resume{table: 0, packet: p})
	for len(r.queue) > 0 {
		next := r.queue[0]
		r.queue = r.queue[1:]
		pass := &pass{run: r, packet: next.packet}
		switch err := pass.lookup(next.table, 0); {
		case errors.Is(err, errPaused):
			r.result.Paused = true
		case err != nil:
			return r.result, err
		}
	}
	return r.result, nil
}

// run is the state of one Trace: what it found, and the recirculations
// still to resume.
type run struct {
	tables      *Tables
	ct          Conntrack
	recirculate int // ct states consumed
	queue       []resume
	result      Result
}

// resume is a recirculated packet waiting to resume in table.
type resume struct {
	table  uint8
	packet Packet
}

// pass is one pass of a packet through the tables: from table 0, or from
// a recirculation.
type pass struct {
	*run
	// packet is the packet as flows match it.
	packet Packet
	// natSrc and natDst are addresses a ct's nat gave the packet that
	// leaves: the datapath translates it, while the flows after the ct
	// still match the addresses it arrived with. Invalid: none.
	natSrc, natDst netip.Addr
	// natSrcPort and natDstPort are the port a ct's nat gave with the
	// address; 0: the port is kept.
	natSrcPort, natDstPort uint16
}

// lookup finds the flow of table the packet matches and executes it.
func (p *pass) lookup(table uint8, depth int) error {
	if depth >= maxDepth {
		return fmt.Errorf("trace: more than %d nested table lookups (a resubmit loop?)", maxDepth)
	}
	f, err := p.tables.match(table, &p.packet)
	if err != nil {
		return err
	}
	if f == nil {
		p.result.Hits = append(p.result.Hits, Hit{Table: table})
		return nil
	}
	p.result.Hits = append(p.result.Hits, Hit{Table: table, Flow: f.mod})
	var next *uint8
	for _, in := range f.mod.Instructions {
		switch in := in.(type) {
		case openflow.ApplyActions:
			if err := p.execute(in.Actions, depth); err != nil {
				return err
			}
		case openflow.GotoTable:
			next = &in.Table
		}
	}
	if next != nil {
		return p.lookup(*next, depth+1)
	}
	return nil
}

// match returns the highest-priority flow of table that p matches, nil if
// none does, or an error if two of that priority do.
func (t *Tables) match(table uint8, p *Packet) (*flow, error) {
	var found *flow
	for _, f := range t.tables[table] {
		if found != nil && f.mod.Priority < found.mod.Priority {
			break
		}
		ok, err := f.matches(p)
		if err != nil {
			return nil, err
		}
		if !ok {
			continue
		}
		if found != nil {
			return nil, fmt.Errorf("trace: packet %v matches two flows of priority %d in table %d, the switch may pick either:\n  %v\n  %v",
				p, f.mod.Priority, table, found.mod, f.mod)
		}
		found = f
	}
	return found, nil
}

func (f *flow) matches(p *Packet) (bool, error) {
	for _, c := range f.conds {
		v, present, err := p.get(c.field)
		if err != nil {
			return false, err
		}
		if !present {
			return false, nil
		}
		for i := range v {
			if v[i]&c.mask[i] != c.value[i] {
				return false, nil
			}
		}
	}
	return true, nil
}

// leaving is the packet as it leaves now: with the nat of earlier ct
// actions.
func (p *pass) leaving() Packet {
	out := p.packet
	if p.natSrc.IsValid() {
		out.Src = p.natSrc
	}
	if p.natDst.IsValid() {
		out.Dst = p.natDst
	}
	if p.natSrcPort != 0 {
		out.SrcPort = p.natSrcPort
	}
	if p.natDstPort != 0 {
		out.DstPort = p.natDstPort
	}
	return out
}

// execute runs actions in order.
func (p *pass) execute(actions []openflow.Action, depth int) error {
	for _, a := range actions {
		switch a := a.(type) {
		case openflow.Output:
			p.output(a.Port)
		case openflow.ControllerPause:
			// The switch stops here; the agent resumes the packet later
			// (SnoopDNS), which no trace follows.
			return errPaused
		case openflow.SetField:
			if err := p.packet.set(a.Field, a.Value, a.Mask); err != nil {
				return err
			}
			switch a.Field { // the datapath writes over the translation
			case openflow.FieldIPv4Src, openflow.FieldIPv6Src:
				p.natSrc, p.natSrcPort = netip.Addr{}, 0
			case openflow.FieldIPv4Dst, openflow.FieldIPv6Dst:
				p.natDst, p.natDstPort = netip.Addr{}, 0
			}
		case openflow.Resubmit:
			if err := p.lookup(a.Table, depth+1); err != nil {
				return err
			}
		case openflow.CT:
			if err := p.conntrack(a); err != nil {
				return err
			}
		case openflow.Group:
			p.result.Groups = append(p.result.Groups, Handed{Group: a.ID, Packet: p.leaving()})
		}
	}
	return nil
}

// output emits the packet to port, skipping the port it came from (only
// IN_PORT sends it back there).
func (p *pass) output(port uint32) {
	switch port {
	case openflow.PortInPort:
		port = p.packet.InPort
	case p.packet.InPort:
		return
	}
	p.result.Emits = append(p.result.Emits, Emit{Port: port, Packet: p.leaving()})
}

// conntrack executes a ct action: its nat applies to the packet that
// leaves; a recirculation forks a copy that resumes in a.Table with the
// model's ct_state; the pass goes on with the conntrack fields cleared.
func (p *pass) conntrack(a openflow.CT) error {
	var nat *openflow.NAT
	for _, x := range a.Actions {
		if n, ok := x.(openflow.NAT); ok { // checkCT allows it and the connection's mark and label
			nat = &n
		}
	}
	if nat != nil && nat.Flags&openflow.NATSrc != 0 {
		p.natSrc, p.natSrcPort = nat.MinAddr, nat.MinPort
	}
	if nat != nil && nat.Flags&openflow.NATDst != 0 {
		p.natDst, p.natDstPort = nat.MinAddr, nat.MinPort
	}
	if a.Recirculate {
		state := openflow.CTStateTrk | openflow.CTStateNew
		if nat != nil && nat.Flags&openflow.NATSrc != 0 {
			state |= openflow.CTStateSNAT
		}
		if nat != nil && nat.Flags&openflow.NATDst != 0 {
			state |= openflow.CTStateDNAT
		}
		if p.recirculate < len(p.ct.States) {
			state = p.ct.States[p.recirculate]
		}
		var label [16]byte
		if p.recirculate < len(p.ct.Labels) {
			label = p.ct.Labels[p.recirculate]
		}
		p.recirculate++
		fork := p.leaving()
		if nat != nil && nat.Flags&(openflow.NATSrc|openflow.NATDst) == 0 && state&(openflow.CTStateSNAT|openflow.CTStateDNAT) != 0 {
			if p.ct.Unnat == nil {
				return fmt.Errorf("trace: %v undoes the translation of %v (ct_state %s), and the Conntrack model has no Unnat",
					a, p.packet, CTStateString(state, "|"))
			}
			fork = p.ct.Unnat(fork)
		}
		fork.CTState, fork.CTZone, fork.CTMark, fork.CTLabel = state, a.Zone, 0, label
		p.queue = append(p.queue, resume{table: a.Table, packet: fork})
	}
	p.packet.CTState, p.packet.CTZone, p.packet.CTMark, p.packet.CTLabel = 0, 0, 0, [16]byte{}
	return nil
}
