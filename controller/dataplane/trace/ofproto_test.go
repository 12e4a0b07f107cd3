package trace_test

import (
	"fmt"
	"net/netip"
	"regexp"
	"strconv"
	"strings"

	"github.com/egressflow/egressflow/controller/dataplane/trace"
	"github.com/egressflow/egressflow/openflow"
)

// This file reads what `ovs-appctl ofproto/trace` prints, independently
// of the tracer: the flows it lists, table by table (across
// recirculations), the NORMAL actions it executed, and what leaves the
// datapath, worked out from each pass's "Flow:" and "Datapath actions:"
// lines (a small interpreter of the datapath actions Open vSwitch
// generates for our flows, which fails on any other).

// hitKey is one table lookup as ofproto/trace lists it.
type hitKey struct {
	table    uint8
	miss     bool
	priority uint16
	cookie   uint64
}

func (h hitKey) String() string {
	if h.miss {
		return fmt.Sprintf("%d. no match", h.table)
	}
	return fmt.Sprintf("%d. priority %d, cookie %#x", h.table, h.priority, h.cookie)
}

// leaving is a packet leaving the switch: the port and the fields the
// cross-check compares.
type leaving struct {
	port           uint32 // OpenFlow port; openflow.PortNormal for the tracer's NORMAL
	src, dst       netip.Addr
	ethSrc, ethDst string
	tos            uint8 // DSCP<<2, as flows print nw_tos
	mark           uint32
}

func (l leaving) String() string {
	return fmt.Sprintf("%s: %v -> %v, dl_src=%s, dl_dst=%s, nw_tos=%d, pkt_mark=%#x",
		openflow.PortName(l.port), l.src, l.dst, l.ethSrc, l.ethDst, l.tos, l.mark)
}

// sameFields reports whether two packets leave with the same fields,
// wherever they go.
func (l leaving) sameFields(o leaving) bool {
	l.port, o.port = 0, 0
	return l == o
}

// leavingOf is the tracer's output in the cross-check's terms.
func leavingOf(e trace.Emit) leaving {
	return leaving{port: e.Port, src: e.Packet.Src, dst: e.Packet.Dst,
		ethSrc: e.Packet.EthSrc.String(), ethDst: e.Packet.EthDst.String(), tos: e.Packet.DSCP << 2, mark: e.Packet.PktMark}
}

// ofprotoTrace is what ofproto/trace says of one packet.
type ofprotoTrace struct {
	hits    []hitKey
	normals int // NORMAL actions executed
	emits   []leaving
}

var (
	// " 0. ip,nw_src=10.244.1.5, priority 200, cookie 0xef1001eb78a54403",
	// "41. priority 100, cookie 0x...", " 0. priority 0", "50. No match."
	hitLine  = regexp.MustCompile(`^\s*(\d+)\. (?:(?:.*, )?priority (\d+)(?:, cookie (0x[0-9a-f]+))?|(No match\.))$`)
	flowLine = regexp.MustCompile(`^Flow: (.*)$`)
	dpLine   = regexp.MustCompile(`^Datapath actions: (.*)$`)
)

// parseOfprotoTrace reads ofproto/trace's output; odp maps datapath port
// numbers to OpenFlow ports.
func parseOfprotoTrace(out string, odp map[uint32]uint32) (ofprotoTrace, error) {
	var tr ofprotoTrace
	var current *leaving // the packet at the start of the pass being read
	for _, line := range strings.Split(out, "\n") {
		if m := hitLine.FindStringSubmatch(line); m != nil {
			table, _ := strconv.ParseUint(m[1], 10, 8)
			h := hitKey{table: uint8(table), miss: m[4] != ""}
			if !h.miss {
				p, _ := strconv.ParseUint(m[2], 10, 16)
				h.priority = uint16(p)
				if m[3] != "" {
					h.cookie, _ = strconv.ParseUint(m[3][2:], 16, 64)
				}
			}
			tr.hits = append(tr.hits, h)
			continue
		}
		if strings.TrimSpace(line) == "NORMAL" {
			tr.normals++
			continue
		}
		if m := flowLine.FindStringSubmatch(line); m != nil {
			l, err := parseFlowFields(m[1])
			if err != nil {
				return tr, err
			}
			current = &l
			continue
		}
		if m := dpLine.FindStringSubmatch(line); m != nil {
			if current == nil {
				return tr, fmt.Errorf("datapath actions before any Flow: line")
			}
			emits, err := datapathEmits(*current, m[1], odp)
			if err != nil {
				return tr, fmt.Errorf("datapath actions %q: %w", m[1], err)
			}
			tr.emits = append(tr.emits, emits...)
			current = nil
		}
	}
	return tr, nil
}

// splitTop splits s at the commas outside parentheses.
func splitTop(s string) []string {
	var out []string
	depth, start := 0, 0
	for i, c := range s {
		switch c {
		case '(':
			depth++
		case ')':
			depth--
		case ',':
			if depth == 0 {
				out = append(out, s[start:i])
				start = i + 1
			}
		}
	}
	if start < len(s) {
		out = append(out, s[start:])
	}
	return out
}

// parseFlowFields reads the fields the cross-check compares from a flow as
// ofproto/trace prints it.
func parseFlowFields(flow string) (leaving, error) {
	var l leaving
	for _, kv := range splitTop(flow) {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			continue // "tcp", "eth", ...
		}
		var err error
		switch k {
		case "nw_src", "ipv6_src":
			l.src, err = netip.ParseAddr(v)
		case "nw_dst", "ipv6_dst":
			l.dst, err = netip.ParseAddr(v)
		case "dl_src":
			l.ethSrc = v
		case "dl_dst":
			l.ethDst = v
		case "nw_tos":
			var tos uint64
			tos, err = strconv.ParseUint(v, 10, 8)
			l.tos = uint8(tos)
		case "pkt_mark":
			var mark uint64
			mark, err = strconv.ParseUint(v, 0, 32)
			l.mark = uint32(mark)
		}
		if err != nil {
			return l, fmt.Errorf("flow field %s: %w", kv, err)
		}
	}
	return l, nil
}

// datapathEmits runs the datapath actions of one pass over the packet it
// started with and returns what they output.
func datapathEmits(p leaving, actions string, odp map[uint32]uint32) ([]leaving, error) {
	var out []leaving
	for _, a := range splitTop(actions) {
		name, args, _ := strings.Cut(strings.TrimSuffix(a, ")"), "(")
		switch {
		case a == "drop":
		case isDigits(a):
			n, _ := strconv.ParseUint(a, 10, 32)
			port, ok := odp[uint32(n)]
			if !ok {
				return nil, fmt.Errorf("datapath port %d is no port of the bridge", n)
			}
			p.port = port
			out = append(out, p)
		case name == "recirc":
			// the pass it resumes follows, with its own Flow: line
		case name == "ct":
			for _, arg := range splitTop(args) {
				nat, ok := strings.CutPrefix(arg, "nat(")
				if !ok || nat == ")" {
					continue
				}
				for _, r := range splitTop(strings.TrimSuffix(nat, ")")) {
					k, v, _ := strings.Cut(r, "=")
					addr, err := netip.ParseAddr(v)
					if err != nil {
						return nil, fmt.Errorf("nat %q: %w", r, err)
					}
					switch k {
					case "src":
						p.src = addr
					case "dst":
						p.dst = addr
					}
				}
			}
		case name == "set":
			if err := datapathSet(&p, args); err != nil {
				return nil, err
			}
		case name == "userspace" && strings.Contains(args, "controller("):
			p.port = openflow.PortController
			out = append(out, p)
		default:
			return nil, fmt.Errorf("datapath action %q is not read here", a)
		}
	}
	return out, nil
}

// datapathSet applies one set(key(...)) action, e.g. set(eth(dst=...)),
// set(ipv4(tos=0x28/0xfc)), set(skb_mark(0x7)).
func datapathSet(p *leaving, arg string) error {
	key, fields, _ := strings.Cut(strings.TrimSuffix(arg, ")"), "(")
	if key == "skb_mark" {
		v, m, err := valueMask(fields, 0xffffffff)
		p.mark = p.mark&^uint32(m) | uint32(v)&uint32(m)
		return err
	}
	for _, kv := range splitTop(fields) {
		k, v, _ := strings.Cut(kv, "=")
		var err error
		switch key + "." + k {
		case "eth.src":
			p.ethSrc = v
		case "eth.dst":
			p.ethDst = v
		case "ipv4.src", "ipv6.src":
			p.src, err = netip.ParseAddr(v)
		case "ipv4.dst", "ipv6.dst":
			p.dst, err = netip.ParseAddr(v)
		case "ipv4.tos", "ipv6.tclass":
			var tos, mask uint64
			tos, mask, err = valueMask(v, 0xff)
			// The cross-check compares the DSCP bits; ECN is never set.
			p.tos = (p.tos&^uint8(mask) | uint8(tos)&uint8(mask)) &^ 0x03
		default:
			return fmt.Errorf("set(%s): field %s not read here", arg, kv)
		}
		if err != nil {
			return fmt.Errorf("set(%s): %w", arg, err)
		}
	}
	return nil
}

// valueMask reads "v" or "v/m" (a missing mask is full).
func valueMask(s string, full uint64) (v, m uint64, err error) {
	vs, ms, masked := strings.Cut(s, "/")
	if v, err = strconv.ParseUint(vs, 0, 64); err != nil {
		return 0, 0, err
	}
	m = full
	if masked {
		m, err = strconv.ParseUint(ms, 0, 64)
	}
	return v, m, err
}

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// agree compares the tracer's result with ofproto/trace's: the same
// lookups (table, priority, cookie, or a miss), the same NORMAL actions,
// and the same packets leaving. An output to a port must leave the
// datapath through that port with the same fields; a packet the tracer
// hands to NORMAL must leave (NORMAL floods, as the trace's switch learned
// no MAC) with its fields through some port, and every datapath output
// must be one of these.
func agree(r trace.Result, o ofprotoTrace) error {
	var hits []hitKey
	for _, h := range r.Hits {
		if h.Flow == nil {
			hits = append(hits, hitKey{table: h.Table, miss: true})
			continue
		}
		hits = append(hits, hitKey{table: h.Table, priority: h.Flow.Priority, cookie: h.Flow.Cookie})
	}
	if fmt.Sprint(hits) != fmt.Sprint(o.hits) {
		return fmt.Errorf("lookups differ:\n  tracer:       %v\n  ofproto/trace: %v", hits, o.hits)
	}
	remaining := append([]leaving(nil), o.emits...)
	var normal []leaving
	for _, e := range r.Emits {
		l := leavingOf(e)
		if l.port == openflow.PortNormal {
			normal = append(normal, l)
			continue
		}
		i := indexOf(remaining, func(x leaving) bool { return x == l })
		if i < 0 {
			return fmt.Errorf("the tracer outputs %v, the datapath does not (it outputs %v)", l, o.emits)
		}
		remaining = append(remaining[:i], remaining[i+1:]...)
	}
	if len(normal) != o.normals {
		return fmt.Errorf("the tracer hands the packet to NORMAL %d times, ofproto/trace %d", len(normal), o.normals)
	}
	for _, x := range remaining {
		if indexOf(normal, x.sameFields) < 0 {
			return fmt.Errorf("the datapath outputs %v, which the tracer does not (its NORMAL packets: %v)", x, normal)
		}
	}
	for _, n := range normal {
		if indexOf(remaining, n.sameFields) < 0 {
			return fmt.Errorf("the tracer hands %v to NORMAL, and nothing like it leaves the datapath (%v)", n, o.emits)
		}
	}
	return nil
}

func indexOf(ls []leaving, f func(leaving) bool) int {
	for i, l := range ls {
		if f(l) {
			return i
		}
	}
	return -1
}
