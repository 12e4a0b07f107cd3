package flowtext

import (
	"encoding/hex"
	"fmt"
	"net/netip"
	"strings"

	"github.com/egressflow/egressflow/openflow"
	"github.com/egressflow/egressflow/openflow/internal/ofnum"
)

// Parsing of ovs-ofctl's action and instruction syntax (ovs-actions(7)),
// the inverse of the actions' String methods.

// ParseInstructionsText parses what follows "actions=" in ovs-ofctl
// syntax: actions (a meter first, if any), then optionally clear_actions,
// write_actions(...), write_metadata:V[/M] and goto_table:N, in that
// order and each at most once, as ovs-ofctl requires. "drop" (alone) or
// nothing is an empty list.
//
// Without the flow's match, mod_tp_src and mod_tp_dst (which write the
// port of the flow's protocol) are refused; ParseFlow reads them.
func ParseInstructionsText(s string) ([]openflow.Instruction, error) {
	insts, err := parseInstructionsText(s, nil)
	if err != nil {
		return nil, &ParseError{Text: s, Err: err}
	}
	return insts, nil
}

// instruction ranks, in the order ovs-ofctl requires them.
const (
	rankApply = iota
	rankClear
	rankWrite
	rankMetadata
	rankGoto
)

var instructionNames = [...]string{"actions", "clear_actions", "write_actions", "write_metadata", "goto_table"}

func parseInstructionsText(s string, match *openflow.Match) ([]openflow.Instruction, error) {
	elems, err := splitKV(s)
	if err != nil {
		return nil, err
	}
	for _, e := range elems {
		if e.key == "drop" && len(elems) > 1 {
			return nil, fmt.Errorf(`"drop" must not be accompanied by any other action or instruction`)
		}
	}
	ap := actionParser{match: match}
	var acts []openflow.Action
	var out [rankGoto + 1]openflow.Instruction
	last := rankApply
	for i, e := range elems {
		rank := rankApply
		var in openflow.Instruction
		switch e.key {
		case "clear_actions":
			rank, in = rankClear, openflow.ClearActions{}
		case "write_actions":
			wa, err := ap.list(e.value)
			if err != nil {
				return nil, fmt.Errorf("write_actions: %w", err)
			}
			rank, in = rankWrite, openflow.WriteActions{Actions: wa}
		case "write_metadata":
			vs, ms, hasMask := strings.Cut(e.value, "/")
			v, err := ofnum.ParseCUint(vs, 64)
			mask := ^uint64(0)
			if err == nil && hasMask {
				mask, err = ofnum.ParseCUint(ms, 64)
			}
			if err != nil {
				return nil, fmt.Errorf("write_metadata: %w", err)
			}
			rank, in = rankMetadata, openflow.WriteMetadata{Metadata: v, Mask: mask}
		case "goto_table":
			t, err := parseTable(e.value)
			if err != nil {
				return nil, fmt.Errorf("goto_table: %w", err)
			}
			rank, in = rankGoto, openflow.GotoTable{Table: t}
		case "drop":
			continue
		case "meter":
			// Open vSwitch takes a meter only before the other actions
			// (where OpenFlow 1.3 has its meter instruction).
			if i != 0 {
				return nil, fmt.Errorf("meter must come before the other actions and instructions")
			}
		}
		if rank < last || rank == last && rank != rankApply {
			return nil, fmt.Errorf("%s after %s: ovs-ofctl requires actions, clear_actions, write_actions, write_metadata and goto_table in this order, each once", instructionNames[rank], instructionNames[last])
		}
		last = rank
		if rank != rankApply {
			out[rank] = in
			continue
		}
		a, err := ap.action(e)
		if err != nil {
			return nil, err
		}
		acts = append(acts, a)
	}
	var insts []openflow.Instruction
	if len(acts) > 0 {
		insts = append(insts, openflow.ApplyActions{Actions: acts})
	}
	for _, in := range out[rankClear:] {
		if in != nil {
			insts = append(insts, in)
		}
	}
	return insts, nil
}

// ParseActionText parses a comma-separated action list in ovs-ofctl
// syntax, such as "ct(commit,zone=5,nat(src=10.0.0.1)),output:2". As for
// ParseInstructionsText, mod_tp_src and mod_tp_dst need a flow (ParseFlow).
func ParseActionText(s string) ([]openflow.Action, error) {
	if strings.TrimSpace(s) == "drop" {
		return nil, nil
	}
	acts, err := actionParser{}.list(s)
	if err != nil {
		return nil, &ParseError{Text: s, Err: err}
	}
	return acts, nil
}

// actionParser parses actions; match is the flow's match when known.
type actionParser struct {
	match *openflow.Match
}

// list parses an action list: ParseActionText's, or one inside clone,
// write_actions or ct's exec.
func (ap actionParser) list(s string) ([]openflow.Action, error) {
	elems, err := splitKV(s)
	if err != nil {
		return nil, err
	}
	var acts []openflow.Action
	for _, e := range elems {
		a, err := ap.action(e)
		if err != nil {
			return nil, err
		}
		acts = append(acts, a)
	}
	return acts, nil
}

// action parses one action.
func (ap actionParser) action(e kv) (openflow.Action, error) {
	a, err := ap.action1(e)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", e.key, err)
	}
	return a, nil
}

func (ap actionParser) action1(e kv) (openflow.Action, error) {
	switch strings.ToLower(e.key) {
	case "drop":
		return nil, fmt.Errorf(`"drop" must not be accompanied by any other action`)
	case "meter":
		// (A flow takes it first only: parseInstructionsText checks.)
		n, err := ofnum.ParseCUint(e.value, 32)
		return openflow.Meter{ID: uint32(n)}, err
	case "output":
		if e.paren || strings.Contains(e.value, "[") {
			return nil, &UnsupportedError{Part: "output:" + e.value, Why: "output to a field or with max_len (output_reg, output_trunc) is not supported"}
		}
		p, err := openflow.ParsePort(e.value)
		return openflow.Output{Port: p, MaxLen: controllerMaxLen(p)}, err
	case "controller":
		return parseController(e)
	case "group":
		n, err := ofnum.ParseCUint(e.value, 32)
		return openflow.Group{ID: uint32(n)}, err
	case "set_queue":
		n, err := ofnum.ParseCUint(e.value, 32)
		return openflow.SetQueue{ID: uint32(n)}, err
	case "dec_ttl":
		return parseDecTTL(e.value)
	case "push_vlan":
		n, err := ofnum.ParseCUint(e.value, 16)
		if err != nil || n != 0x8100 && n != 0x88a8 {
			return nil, fmt.Errorf("%q is not a VLAN ethertype (0x8100 or 0x88a8)", e.value)
		}
		return openflow.PushVLAN{EtherType: uint16(n)}, nil
	case "pop_vlan", "strip_vlan":
		return openflow.PopVLAN{}, nil
	case "ct_clear":
		return openflow.CTClear{}, nil
	case "exit":
		return openflow.Exit{}, nil
	case "set_field":
		return parseSetFieldText(e.value)
	case "load":
		return parseLoadText(e.value)
	case "move":
		return parseMoveText(e.value)
	case "mod_dl_src", "mod_dl_dst", "mod_nw_src", "mod_nw_dst":
		f := map[string]openflow.Field{"mod_dl_src": openflow.FieldEthSrc, "mod_dl_dst": openflow.FieldEthDst, "mod_nw_src": openflow.FieldIPv4Src, "mod_nw_dst": openflow.FieldIPv4Dst}[e.key]
		v, mask, err := f.ParseValue(e.value)
		if err == nil && mask != nil {
			err = fmt.Errorf("%s takes no mask", e.key)
		}
		return openflow.SetField{Field: f, Value: v}, err
	case "mod_tp_src", "mod_tp_dst":
		return ap.parseModTp(e)
	case "resubmit":
		return parseResubmitText(e)
	case "ct":
		return ap.parseCTText(e.value)
	case "nat":
		// Inside ct's exec list, where Open vSwitch prints a nat that does
		// not come first, or alone (which it prints, and refuses to send).
		return parseNATText(e.value, e.hasValue)
	case "conjunction":
		return parseConjunctionText(e.value)
	case "note":
		return parseNoteText(e.value)
	case "clone":
		acts, err := ap.list(e.value)
		return openflow.Clone{Actions: acts}, err
	case "learn":
		return parseLearnText(e.value)
	case "raw":
		data, err := hex.DecodeString(e.value)
		if err != nil {
			return nil, err
		}
		a := openflow.RawAction{Data: data}
		if _, err := a.AppendBinary(nil); err != nil {
			return nil, err
		}
		return a, nil
	}
	if !e.hasValue {
		// A bare port (other than the word controller, read above) is an
		// output with max_len 0, as in ovs-ofctl.
		if p, err := openflow.ParsePort(e.key); err == nil {
			return openflow.Output{Port: p}, nil
		}
	}
	return nil, &UnsupportedError{Part: fmt.Sprintf("action %q", e.key)}
}

// controllerMaxLen is the max_len ovs-ofctl gives output:PORT: whole
// packets to the controller, 0 elsewhere.
func controllerMaxLen(port uint32) uint16 {
	if port == openflow.PortController {
		return 0xffff
	}
	return 0
}

// parseController reads controller, controller:MAX_LEN (digits, in C's
// base 0), controller(max_len=N) and controller(pause), with or without
// max_len. The other controller arguments (reason, id, userdata, meter_id)
// are not encoded by this package.
func parseController(e kv) (openflow.Action, error) {
	a := openflow.Output{Port: openflow.PortController, MaxLen: 0xffff}
	if !e.hasValue || e.value == "" {
		return a, nil
	}
	if ofnum.IsDigits(e.value) {
		n, err := ofnum.ParseCUint(e.value, 16)
		a.MaxLen = uint16(n)
		return a, err
	}
	elems, err := splitKV(e.value)
	if err != nil {
		return nil, err
	}
	pause := false
	for _, arg := range elems {
		switch {
		case arg.key == "pause" && !arg.hasValue:
			pause = true
		case arg.key == "max_len":
			n, err := ofnum.ParseCUint(arg.value, 16)
			if err != nil {
				return nil, err
			}
			a.MaxLen = uint16(n)
		default:
			return nil, &UnsupportedError{Part: fmt.Sprintf("controller argument %q", arg.key)}
		}
	}
	if pause {
		return openflow.ControllerPause{MaxLen: a.MaxLen}, nil
	}
	return a, nil
}

// parseDecTTL reads dec_ttl or dec_ttl(ID,...): controller ids in
// decimal, separated by commas or spaces.
func parseDecTTL(s string) (openflow.Action, error) {
	var a openflow.DecTTL
	for _, f := range strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' }) {
		id, err := parseAtoi16(f)
		if err != nil {
			return nil, fmt.Errorf("controller id: %w", err)
		}
		a.ControllerIDs = append(a.ControllerIDs, id)
	}
	return a, nil
}

// parseModTp reads mod_tp_src and mod_tp_dst, which write the port of the
// flow's protocol (as set_field in OpenFlow 1.5).
func (ap actionParser) parseModTp(e kv) (openflow.Action, error) {
	if ap.match == nil {
		return nil, &UnsupportedError{Part: e.key, Why: "needs the flow's match (ParseFlow) to know which protocol's port it writes"}
	}
	f, ok := l4PortField(ap.match, e.key == "mod_tp_src")
	if !ok {
		return nil, &UnsupportedError{Part: e.key, Why: "needs tcp, udp or sctp in the match"}
	}
	v, err := ofnum.ParseCUint(e.value, 16)
	return openflow.SetField{Field: f, Value: ofnum.UintBytes(v, 2)}, err
}

func parseSetFieldText(s string) (openflow.Action, error) {
	val, dst, ok := strings.Cut(s, "->")
	if !ok {
		return nil, fmt.Errorf("want VALUE->FIELD")
	}
	f, err := openflow.ParseField(dst)
	if err != nil {
		return nil, err
	}
	v, mask, err := f.ParseValue(val)
	if err != nil {
		return nil, err
	}
	if mask != nil && ofnum.IsOnes(mask) {
		mask = nil
	}
	// A mask is taken even on a field a match cannot mask: ovs-ofctl
	// prints one there for a load into part of such a field.
	for i := range mask {
		if v[i]&^mask[i] != 0 {
			return nil, fmt.Errorf("value %s has bits outside its mask", val)
		}
	}
	return openflow.SetField{Field: f, Value: v, Mask: mask}, nil
}

// parseLoadText turns load:VALUE->DST[bits] into the OpenFlow 1.5
// set_field Open vSwitch sends for it.
func parseLoadText(s string) (openflow.Action, error) {
	val, dst, ok := strings.Cut(s, "->")
	if !ok {
		return nil, fmt.Errorf("want VALUE->DST")
	}
	sf, err := openflow.ParseSubfield(dst)
	if err != nil {
		return nil, err
	}
	value, mask, err := subfieldValue(sf, val)
	if err != nil {
		return nil, err
	}
	// Masked unless all the field's bytes are written, even for a field
	// that cannot be masked in a match (ip_dscp[0..5] is masked), as
	// ovs-ofctl sends it.
	if ofnum.IsOnes(mask) {
		mask = nil
	}
	return openflow.SetField{Field: sf.Field, Value: value, Mask: mask}, nil
}

func parseMoveText(s string) (openflow.Action, error) {
	src, dst, ok := strings.Cut(s, "->")
	if !ok {
		return nil, fmt.Errorf("want SRC->DST")
	}
	sf, err := openflow.ParseSubfield(src)
	if err != nil {
		return nil, err
	}
	df, err := openflow.ParseSubfield(dst)
	if err != nil {
		return nil, err
	}
	if sf.NBits() != df.NBits() {
		return nil, fmt.Errorf("source is %d bits, destination %d", sf.NBits(), df.NBits())
	}
	return openflow.CopyField{Src: sf, Dst: df}, nil
}

// parseResubmitText reads resubmit:PORT, resubmit(PORT,TABLE) and
// resubmit(PORT,TABLE,ct), where PORT or TABLE may be empty but not both,
// and a table of 255 is no table.
func parseResubmitText(e kv) (openflow.Action, error) {
	a := openflow.Resubmit{Table: openflow.TableAll}
	if !e.paren {
		p, err := openflow.ParsePort(e.value)
		if err != nil {
			return nil, err
		}
		if p != openflow.PortInPort {
			a.Port = p
		}
	} else {
		parts := strings.Split(e.value, ",")
		if len(parts) < 2 || len(parts) > 3 {
			return nil, fmt.Errorf("want resubmit([port],[table][,ct])")
		}
		if p := strings.TrimSpace(parts[0]); p != "" {
			port, err := openflow.ParsePort(p)
			if err != nil {
				return nil, err
			}
			if port != openflow.PortInPort {
				a.Port = port
			}
		}
		if t := strings.TrimSpace(parts[1]); t != "" {
			n, err := parseTable(t)
			if err != nil {
				return nil, err
			}
			a.Table = n
		}
		if len(parts) == 3 {
			if strings.TrimSpace(parts[2]) != "ct" {
				return nil, fmt.Errorf("unknown resubmit option %q", parts[2])
			}
			a.CT = true
		}
	}
	if a.Port == 0 && a.Table == openflow.TableAll {
		return nil, fmt.Errorf(`at least one "in_port" or "table" must be specified on resubmit`)
	}
	return a, nil
}

// parseCTText reads ct's arguments. Its nested actions (nat and exec's
// list) keep the order they are written in, as in Open vSwitch.
func (ap actionParser) parseCTText(s string) (openflow.Action, error) {
	elems, err := splitKV(s)
	if err != nil {
		return nil, err
	}
	var a openflow.CT
	for _, e := range elems {
		switch e.key {
		case "commit":
			a.Flags |= openflow.CTCommit
		case "force":
			a.Flags |= openflow.CTForce
		case "table":
			t, err := parseTable(e.value)
			if err != nil {
				return nil, fmt.Errorf("table: %w", err)
			}
			a.Recirculate, a.Table = true, t
		case "zone":
			if n, err := ofnum.ParseCUint(e.value, 16); err == nil {
				a.Zone, a.ZoneField = uint16(n), openflow.Subfield{}
				break
			}
			sf, err := openflow.ParseSubfield(e.value)
			if err != nil {
				return nil, fmt.Errorf("zone: %w", err)
			}
			if sf.NBits() != 16 {
				return nil, &UnsupportedError{Part: "ct zone=" + e.value, Why: "a zone field other than 16 bits"}
			}
			a.ZoneField = sf
		case "alg":
			switch e.value {
			case "ftp":
				a.Alg = openflow.CTAlgFTP
			case "tftp":
				a.Alg = openflow.CTAlgTFTP
			default:
				// Not ovs-ofctl syntax, but what it prints for other ports.
				n, err := ofnum.ParseDecimal(e.value, 16)
				if err != nil {
					return nil, fmt.Errorf("alg: unknown %q", e.value)
				}
				a.Alg = uint16(n)
			}
		case "nat":
			n, err := parseNATText(e.value, e.hasValue)
			if err != nil {
				return nil, err
			}
			a.Actions = append(a.Actions, n)
		case "exec":
			acts, err := ap.list(e.value)
			if err != nil {
				return nil, fmt.Errorf("exec: %w", err)
			}
			a.Actions = append(a.Actions, acts...)
		default:
			return nil, &UnsupportedError{Part: fmt.Sprintf("ct argument %q", e.key)}
		}
	}
	if a.Flags&openflow.CTForce != 0 && a.Flags&openflow.CTCommit == 0 {
		return nil, fmt.Errorf(`"force" needs "commit"`)
	}
	return a, nil
}

func parseNATText(s string, hasValue bool) (openflow.Action, error) {
	var a openflow.NAT
	if !hasValue || s == "" {
		return a, nil
	}
	elems, err := splitNATArgs(s)
	if err != nil {
		return nil, err
	}
	for _, e := range elems {
		key, val, hasVal := strings.Cut(e, "=")
		switch key {
		case "src", "dst":
			if a.Flags&(openflow.NATSrc|openflow.NATDst) != 0 {
				return nil, fmt.Errorf("nat: only one of src and dst")
			}
			if key == "src" {
				a.Flags |= openflow.NATSrc
			} else {
				a.Flags |= openflow.NATDst
			}
			if hasVal {
				if err := parseNATRange(&a, val); err != nil {
					return nil, err
				}
			}
		case "persistent", "hash", "random":
			if a.Flags&(openflow.NATSrc|openflow.NATDst) == 0 {
				return nil, fmt.Errorf("nat: %s needs src or dst first", key)
			}
			a.Flags |= map[string]uint16{"persistent": openflow.NATPersistent, "hash": openflow.NATProtoHash, "random": openflow.NATProtoRandom}[key]
		default:
			return nil, fmt.Errorf("nat: unknown argument %q", e)
		}
	}
	if a.Flags&openflow.NATProtoHash != 0 && a.Flags&openflow.NATProtoRandom != 0 {
		return nil, fmt.Errorf(`nat: both "hash" and "random"`)
	}
	return a, nil
}

// splitNATArgs splits nat arguments at commas outside brackets.
func splitNATArgs(s string) ([]string, error) {
	var out []string
	depth, start := 0, 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '[':
			depth++
		case ']':
			depth--
		case ',':
			if depth == 0 {
				out = append(out, strings.TrimSpace(s[start:i]))
				start = i + 1
			}
		}
	}
	if depth != 0 {
		return nil, fmt.Errorf("nat: unbalanced brackets in %q", s)
	}
	return append(out, strings.TrimSpace(s[start:])), nil
}

// parseNATRange parses ADDR[-ADDR][:PORT[-PORT]], IPv6 addresses in
// brackets when ports follow, ports in base 10.
func parseNATRange(a *openflow.NAT, s string) error {
	var addrs, ports string
	if strings.HasPrefix(s, "[") {
		end := strings.LastIndex(s, "]")
		if end < 0 {
			return fmt.Errorf("nat: missing ] in %q", s)
		}
		addrs = s[:end+1]
		rest := s[end+1:]
		if rest != "" {
			if rest[0] != ':' {
				return fmt.Errorf("nat: bad range %q", s)
			}
			ports = rest[1:]
		}
		addrs = strings.NewReplacer("[", "", "]", "").Replace(addrs)
	} else if strings.Count(s, ":") == 1 && strings.Contains(s, ".") {
		addrs, ports, _ = strings.Cut(s, ":")
	} else {
		addrs = s
	}
	lo, hi, isRange := strings.Cut(addrs, "-")
	var err error
	if a.MinAddr, err = netip.ParseAddr(lo); err != nil || a.MinAddr.Zone() != "" {
		return fmt.Errorf("nat: bad address %q", lo)
	}
	if isRange {
		if a.MaxAddr, err = netip.ParseAddr(hi); err != nil || a.MaxAddr.Zone() != "" {
			return fmt.Errorf("nat: bad address %q", hi)
		}
		if a.MaxAddr.Is4() != a.MinAddr.Is4() {
			return fmt.Errorf("nat: mixed address families in %q", addrs)
		}
	}
	if a.MinAddr.IsUnspecified() || (a.MaxAddr.IsValid() && a.MaxAddr.IsUnspecified()) {
		return fmt.Errorf("nat: the unspecified address %v cannot be a translation", a.MinAddr)
	}
	if a.MaxAddr == a.MinAddr {
		a.MaxAddr = netip.Addr{} // a one-address "range"
	}
	if ports != "" {
		plo, phi, isPRange := strings.Cut(ports, "-")
		p, err := ofnum.ParseDecimal(plo, 16)
		if err != nil {
			return fmt.Errorf("nat: port: %w", err)
		}
		if a.MinPort = uint16(p); a.MinPort == 0 {
			return fmt.Errorf("nat: port range cannot start at 0")
		}
		if isPRange {
			if p, err = ofnum.ParseDecimal(phi, 16); err != nil {
				return fmt.Errorf("nat: port: %w", err)
			}
			if a.MaxPort = uint16(p); a.MaxPort == a.MinPort {
				a.MaxPort = 0
			}
		}
	}
	return nil
}

// parseConjunctionText reads conjunction(ID,K/N): the id in C's base 0,
// the clause and the number of clauses in base 10, 1 <= K <= N, 2 <= N
// <= 64.
func parseConjunctionText(s string) (openflow.Action, error) {
	id, kn, ok := strings.Cut(s, ",")
	k, n, ok2 := strings.Cut(kn, "/")
	if !ok || !ok2 {
		return nil, fmt.Errorf("want conjunction(id,k/n)")
	}
	x, err1 := ofnum.ParseCUint(strings.TrimSpace(id), 32)
	y, err2 := ofnum.ParseDecimal(strings.TrimSpace(k), 8)
	z, err3 := ofnum.ParseDecimal(strings.TrimSpace(n), 8)
	if err1 != nil || err2 != nil || err3 != nil || y == 0 || y > z || z < 2 || z > 64 {
		return nil, fmt.Errorf("bad conjunction(%s)", s)
	}
	return openflow.Conjunction{ID: uint32(x), Clause: uint8(y), NClauses: uint8(z)}, nil
}

// parseNoteText reads note:HEX, bytes as hex pairs optionally separated
// by dots.
func parseNoteText(s string) (openflow.Action, error) {
	var data []byte
	for _, part := range strings.Split(s, ".") {
		x, err := hex.DecodeString(part)
		if err != nil {
			return nil, fmt.Errorf("bad hex in note: %q", part)
		}
		data = append(data, x...)
	}
	return openflow.Note{Data: data}, nil
}

// parseLearnText reads learn(...): table in base 10, the timeouts and
// priority as ovs-ofctl's atoi does (decimal digits here), the cookie in
// C's base 0, flags, and the specs: DST[=SRC|=VALUE] matches,
// load:SRC|VALUE->DST and output:SRC.
func parseLearnText(s string) (openflow.Action, error) {
	elems, err := splitKV(s)
	if err != nil {
		return nil, err
	}
	a := openflow.Learn{Table: 1, Priority: openflow.DefaultPriority}
	for _, e := range elems {
		var err error
		switch e.key {
		case "table":
			a.Table, err = parseTable(e.value)
		case "priority":
			a.Priority, err = parseAtoi16(e.value)
		case "idle_timeout":
			a.IdleTimeout, err = parseAtoi16(e.value)
		case "hard_timeout":
			a.HardTimeout, err = parseAtoi16(e.value)
		case "fin_idle_timeout":
			a.FinIdleTimeout, err = parseAtoi16(e.value)
		case "fin_hard_timeout":
			a.FinHardTimeout, err = parseAtoi16(e.value)
		case "cookie":
			a.Cookie, err = ofnum.ParseCUint(e.value, 64)
		case "send_flow_rem":
			a.Flags |= openflow.LearnSendFlowRem
		case "delete_learned":
			a.Flags |= openflow.LearnDeleteLearned
		case "limit", "result_dst":
			err = &UnsupportedError{Part: fmt.Sprintf("learn argument %q", e.key), Why: "needs NXAST_LEARN2, which this package does not encode"}
		case "load":
			err = parseLearnLoad(&a, e.value)
		case "output":
			var sf openflow.Subfield
			if sf, err = openflow.ParseSubfield(e.value); err == nil {
				a.Specs = append(a.Specs, openflow.LearnSpec{Kind: openflow.LearnOutput, Src: sf})
			}
		default:
			err = parseLearnMatch(&a, e)
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", e.key, err)
		}
	}
	return a, nil
}

// learnImmediate encodes v into the 2*ceil(bits/16) bytes a learn spec carries.
func learnImmediate(v []byte, bits int) ([]byte, error) {
	k := 2 * ((bits + 15) / 16)
	out := make([]byte, k)
	for i := 0; i < 8*len(v); i++ {
		if !ofnum.GetBit(v, i) {
			continue
		}
		if i >= bits {
			return nil, fmt.Errorf("value does not fit into %d bits", bits)
		}
		ofnum.SetBit(out, i, true)
	}
	return out, nil
}

func parseLearnLoad(a *openflow.Learn, s string) error {
	src, dst, ok := strings.Cut(s, "->")
	if !ok {
		return fmt.Errorf("want SRC->DST")
	}
	d, err := openflow.ParseSubfield(dst)
	if err != nil {
		return err
	}
	spec := openflow.LearnSpec{Kind: openflow.LearnLoad, Dst: d}
	if src != "" && src[0] >= '0' && src[0] <= '9' {
		v, err := ofnum.ParseUintBytes(src, 16)
		if err != nil {
			return err
		}
		if spec.Value, err = learnImmediate(v, d.NBits()); err != nil {
			return err
		}
	} else {
		if spec.Src, err = openflow.ParseSubfield(src); err != nil {
			return err
		}
		if spec.Src.NBits() != d.NBits() {
			return fmt.Errorf("%v and %v differ in width", spec.Src, d)
		}
	}
	a.Specs = append(a.Specs, spec)
	return nil
}

// parseLearnMatch reads a match spec: DST (the packet's own bits), DST=SRC
// (a subfield of the same width) or DST=VALUE, the value written as the
// field's values are when DST is the whole field, else as an integer.
func parseLearnMatch(a *openflow.Learn, e kv) error {
	d, err := openflow.ParseSubfield(e.key)
	if err != nil {
		return err
	}
	spec := openflow.LearnSpec{Kind: openflow.LearnMatch, Dst: d}
	if !e.hasValue {
		spec.Src = d
		a.Specs = append(a.Specs, spec)
		return nil
	}
	if s, err := openflow.ParseSubfield(e.value); err == nil {
		if s.NBits() != d.NBits() {
			return fmt.Errorf("%v and %v differ in width", s, d)
		}
		spec.Src = s
		a.Specs = append(a.Specs, spec)
		return nil
	}
	var v []byte
	if d.Offset == 0 && d.NBits() == d.Field.Bits() {
		var mask []byte
		if v, mask, err = d.Field.ParseValue(e.value); err == nil && mask != nil {
			err = fmt.Errorf("a learned match value takes no mask")
		}
	} else {
		v, err = ofnum.ParseUintBytes(e.value, 16)
	}
	if err != nil {
		return err
	}
	if spec.Value, err = learnImmediate(v, d.NBits()); err != nil {
		return err
	}
	a.Specs = append(a.Specs, spec)
	return nil
}
