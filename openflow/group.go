package openflow

import (
	"strconv"
	"strings"
)

// GroupType is the type of a group (OFPGT_*): how it uses its buckets.
type GroupType uint8

const (
	// GroupTypeAll runs every bucket (multicast, flooding).
	GroupTypeAll GroupType = 0
	// GroupTypeSelect runs one bucket, chosen by a hash of the packet's
	// flow, buckets weighted by Weight: ECMP.
	GroupTypeSelect GroupType = 1
	// GroupTypeIndirect runs its one bucket: many flows that share a next
	// hop, changed in one place.
	GroupTypeIndirect GroupType = 2
	// GroupTypeFastFailover runs the first live bucket (WatchPort,
	// WatchGroup).
	GroupTypeFastFailover GroupType = 3
)

// groupTypeNames are the types as ovs-ofctl spells them.
var groupTypeNames = []string{"all", "select", "indirect", "ff"}

func (t GroupType) String() string {
	if int(t) < len(groupTypeNames) {
		return groupTypeNames[t]
	}
	return "type(" + strconv.Itoa(int(t)) + ")"
}

// GroupModCommand is the command of a GroupMod (OFPGC15_*).
type GroupModCommand uint16

const (
	GroupAdd          GroupModCommand = 0 // add a group; fails if it exists
	GroupModify       GroupModCommand = 1 // replace a group's type and buckets
	GroupDelete       GroupModCommand = 2 // delete a group (GroupAll: every group) and the flows that use it
	GroupInsertBucket GroupModCommand = 3 // insert buckets before CommandBucketID
	GroupRemoveBucket GroupModCommand = 5 // remove the bucket CommandBucketID
)

func (c GroupModCommand) String() string {
	switch c {
	case GroupAdd:
		return "add"
	case GroupModify:
		return "modify"
	case GroupDelete:
		return "delete"
	case GroupInsertBucket:
		return "insert_bucket"
	case GroupRemoveBucket:
		return "remove_bucket"
	}
	return "command(" + strconv.Itoa(int(c)) + ")"
}

// Bucket IDs with a meaning of their own (OFPG15_BUCKET_*), as
// GroupMod.CommandBucketID.
const (
	BucketMax   uint32 = 0xffffff00 // the last ID a bucket may have
	BucketFirst uint32 = 0xfffffffd
	BucketLast  uint32 = 0xfffffffe
	BucketAll   uint32 = 0xffffffff
)

// Bucket is one of a group's buckets (ofp15_bucket): the actions it runs,
// and when the group chooses it. Zero values mean none where OpenFlow has
// a sentinel: WatchPort 0 is PortAny and WatchGroup 0 is GroupAny (port 0
// is not a valid port and group 0 cannot watch itself). A Weight of 0 is
// sent as no weight property: only select groups may carry one, and
// Open vSwitch gives a select group's bucket without one the weight 1.
type Bucket struct {
	ID         uint32
	Actions    []Action
	Weight     uint16
	WatchPort  uint32
	WatchGroup uint32
	// Properties are bucket properties this package does not model, kept
	// verbatim.
	Properties []byte
}

// Bucket property types (OFPGBPT15_*).
const (
	bucketPropWeight     = 0
	bucketPropWatchPort  = 1
	bucketPropWatchGroup = 2
)

const bucketFixedLen = 8

func (k *Bucket) appendTo(b []byte) ([]byte, error) {
	start := len(b)
	b = append(b, 0, 0, 0, 0)
	b = be.AppendUint32(b, k.ID)
	actionsStart := len(b)
	b, err := AppendActions(b, k.Actions)
	if err != nil {
		return b, err
	}
	if err := putLen16(b, actionsStart, start+2, "bucket actions"); err != nil {
		return b, err
	}
	if k.Weight != 0 {
		b = be.AppendUint16(append(b, 0, bucketPropWeight, 0, 8), k.Weight)
		b = append(b, 0, 0)
	}
	if k.WatchPort != 0 {
		b = be.AppendUint32(append(b, 0, bucketPropWatchPort, 0, 8), k.WatchPort)
	}
	if k.WatchGroup != 0 {
		b = be.AppendUint32(append(b, 0, bucketPropWatchGroup, 0, 8), k.WatchGroup)
	}
	b = append(b, k.Properties...)
	return b, putLen16(b, start, start, "bucket")
}

// appendBuckets appends buckets and stores their length at b[at:].
func appendBuckets(b []byte, at int, buckets []Bucket) ([]byte, error) {
	start := len(b)
	for i := range buckets {
		var err error
		if b, err = buckets[i].appendTo(b); err != nil {
			return b, err
		}
	}
	return b, putLen16(b, start, at, "buckets")
}

// parseBuckets decodes a bucket array.
func parseBuckets(b []byte) ([]Bucket, error) {
	var buckets []Bucket
	for off := 0; off < len(b); {
		if len(b)-off < bucketFixedLen {
			return nil, decodeErr("bucket", off, "%d bytes, want at least %d", len(b)-off, bucketFixedLen)
		}
		n, actionsLen := int(be.Uint16(b[off:])), int(be.Uint16(b[off+2:]))
		if n < bucketFixedLen || off+n > len(b) || bucketFixedLen+actionsLen > n {
			return nil, decodeErr("bucket", off, "length %d (actions %d) does not fit in %d bytes", n, actionsLen, len(b)-off)
		}
		k := Bucket{ID: be.Uint32(b[off+4:])}
		var err error
		if k.Actions, err = ParseActions(b[off+bucketFixedLen : off+bucketFixedLen+actionsLen]); err != nil {
			return nil, err
		}
		if err := k.parseProperties(b[off+bucketFixedLen+actionsLen:off+n], off+bucketFixedLen+actionsLen); err != nil {
			return nil, err
		}
		buckets = append(buckets, k)
		off += n
	}
	return buckets, nil
}

// parseProperties decodes a bucket's properties, at offset base of the
// bucket array. A known property seen twice is kept verbatim the second
// time, so that what was decoded encodes again as it was read.
func (k *Bucket) parseProperties(p []byte, base int) error {
	var weight, port, group bool
	for q := 0; q < len(p); {
		if len(p)-q < 4 {
			return decodeErr("bucket property", base+q, "%d trailing bytes", len(p)-q)
		}
		typ, n := be.Uint16(p[q:]), int(be.Uint16(p[q+2:]))
		if n < 4 || q+pad8(n) > len(p) {
			return decodeErr("bucket property", base+q, "length %d does not fit in %d bytes", n, len(p)-q)
		}
		v := p[q+4 : q+n]
		switch {
		case typ == bucketPropWeight && n == 8 && !weight && be.Uint16(v) != 0 && v[2] == 0 && v[3] == 0:
			k.Weight, weight = be.Uint16(v), true
		case typ == bucketPropWatchPort && n == 8 && !port && be.Uint32(v) != 0 && be.Uint32(v) != PortAny:
			k.WatchPort, port = be.Uint32(v), true
		case typ == bucketPropWatchGroup && n == 8 && !group && be.Uint32(v) != 0 && be.Uint32(v) != GroupAny:
			k.WatchGroup, group = be.Uint32(v), true
		default:
			k.Properties = append(k.Properties, p[q:q+pad8(n)]...)
		}
		q += pad8(n)
	}
	return nil
}

// GroupMod adds, modifies or deletes a group (OFPT_GROUP_MOD).
//
// CommandBucketID says where GroupInsertBucket inserts and which bucket
// GroupRemoveBucket removes (an ID, BucketFirst, BucketLast or BucketAll).
// The other commands always send BucketAll, the only value they allow, and
// decode with CommandBucketID 0.
type GroupMod struct {
	Command         GroupModCommand
	Type            GroupType
	GroupID         uint32
	CommandBucketID uint32
	Buckets         []Bucket
	// Properties are the group's properties, kept verbatim (Open vSwitch's
	// selection method, for one).
	Properties []byte
}

func (m *GroupMod) MsgType() MessageType { return TypeGroupMod }

// changesBuckets says whether the command names a bucket.
func (c GroupModCommand) changesBuckets() bool {
	return c == GroupInsertBucket || c == GroupRemoveBucket
}

const groupModFixedLen = 16

func (m *GroupMod) AppendBody(b []byte, _ uint32) ([]byte, error) {
	b = be.AppendUint16(b, uint16(m.Command))
	b = append(b, byte(m.Type), 0)
	b = be.AppendUint32(b, m.GroupID)
	lenAt := len(b)
	b = append(b, 0, 0, 0, 0)
	bucketID := BucketAll
	if m.Command.changesBuckets() {
		bucketID = m.CommandBucketID
	}
	b = be.AppendUint32(b, bucketID)
	b, err := appendBuckets(b, lenAt, m.Buckets)
	if err != nil {
		return b, err
	}
	return append(b, m.Properties...), nil
}

func decodeGroupMod(b []byte) (Message, error) {
	if len(b) < groupModFixedLen {
		return nil, decodeErr("GROUP_MOD", 0, "body is %d bytes, want at least %d", len(b), groupModFixedLen)
	}
	m := &GroupMod{Command: GroupModCommand(be.Uint16(b)), Type: GroupType(b[2]), GroupID: be.Uint32(b[4:])}
	if m.Command.changesBuckets() {
		m.CommandBucketID = be.Uint32(b[12:])
	}
	n := int(be.Uint16(b[8:]))
	if groupModFixedLen+n > len(b) {
		return nil, decodeErr("GROUP_MOD", 8, "buckets of %d bytes do not fit in %d", n, len(b)-groupModFixedLen)
	}
	var err error
	if m.Buckets, err = parseBuckets(b[groupModFixedLen : groupModFixedLen+n]); err != nil {
		return nil, err
	}
	m.Properties = cloneBytes(b[groupModFixedLen+n:])
	return m, nil
}

// GroupDesc is a group as the switch describes it (ofp15_group_desc): what
// GroupDescReply carries, and what a GroupMod that adds it says.
type GroupDesc struct {
	Type       GroupType
	GroupID    uint32
	Buckets    []Bucket
	Properties []byte
}

// GroupMod returns the message that adds g.
func (g *GroupDesc) GroupMod() *GroupMod {
	return &GroupMod{Command: GroupAdd, Type: g.Type, GroupID: g.GroupID, Buckets: g.Buckets, Properties: g.Properties}
}

const groupDescFixedLen = 16

func (g *GroupDesc) appendTo(b []byte) ([]byte, error) {
	start := len(b)
	b = append(b, 0, 0, byte(g.Type), 0)
	b = be.AppendUint32(b, g.GroupID)
	lenAt := len(b)
	b = append(b, 0, 0, 0, 0, 0, 0, 0, 0)
	b, err := appendBuckets(b, lenAt, g.Buckets)
	if err != nil {
		return b, err
	}
	b = append(b, g.Properties...)
	return b, putLen16(b, start, start, "group description")
}

// GroupDescRequest asks for the description of one group, or of every group
// with GroupAll (OFPMP_GROUP_DESC request; what ovs-ofctl dump-groups
// sends). GroupID 0 means GroupAll: group 0 is a valid group, but a
// reconciler asks for them all.
type GroupDescRequest struct {
	Flags   uint16
	GroupID uint32
}

func (m *GroupDescRequest) MsgType() MessageType { return TypeMultipartRequest }

func (m *GroupDescRequest) AppendBody(b []byte, _ uint32) ([]byte, error) {
	b = appendMultipartHeader(b, MultipartGroupDesc, m.Flags)
	b = be.AppendUint32(b, zeroAs(m.GroupID, GroupAll))
	return append(b, 0, 0, 0, 0), nil
}

// GroupDescReply is one part of the reply to a GroupDescRequest.
type GroupDescReply struct {
	Flags  uint16
	Groups []GroupDesc
}

func (m *GroupDescReply) MsgType() MessageType { return TypeMultipartReply }

// More reports whether more parts follow.
func (m *GroupDescReply) More() bool { return m.Flags&MultipartMore != 0 }

func (m *GroupDescReply) AppendBody(b []byte, _ uint32) ([]byte, error) {
	b = appendMultipartHeader(b, MultipartGroupDesc, m.Flags)
	for i := range m.Groups {
		var err error
		if b, err = m.Groups[i].appendTo(b); err != nil {
			return b, err
		}
	}
	return b, nil
}

func decodeGroupDescReply(flags uint16, b []byte) (Message, error) {
	m := &GroupDescReply{Flags: flags}
	for off := 0; off < len(b); {
		if len(b)-off < groupDescFixedLen {
			return nil, decodeErr("group description", off, "%d bytes, want at least %d", len(b)-off, groupDescFixedLen)
		}
		n, bucketsLen := int(be.Uint16(b[off:])), int(be.Uint16(b[off+8:]))
		if n < groupDescFixedLen || off+n > len(b) || groupDescFixedLen+bucketsLen > n {
			return nil, decodeErr("group description", off, "length %d (buckets %d) does not fit in %d bytes", n, bucketsLen, len(b)-off)
		}
		g := GroupDesc{Type: GroupType(b[off+2]), GroupID: be.Uint32(b[off+4:])}
		var err error
		if g.Buckets, err = parseBuckets(b[off+groupDescFixedLen : off+groupDescFixedLen+bucketsLen]); err != nil {
			return nil, err
		}
		g.Properties = cloneBytes(b[off+groupDescFixedLen+bucketsLen : off+n])
		m.Groups = append(m.Groups, g)
		off += n
	}
	return m, nil
}

// String returns the group as ovs-ofctl dump-groups prints it.
func (g *GroupDesc) String() string { return string(g.appendText(nil)) }

// String returns the command and what it names, in ovs-ofctl's words:
// "delete group_id=7", "remove_bucket group_id=7,command_bucket_id=1",
// "add group_id=7,type=select,bucket=...".
func (m *GroupMod) String() string {
	b := strconv.AppendUint(append([]byte(m.Command.String()), " group_id="...), uint64(m.GroupID), 10)
	if m.Command == GroupDelete {
		return string(b)
	}
	if m.Command.changesBuckets() {
		b = strconv.AppendUint(append(b, ",command_bucket_id="...), uint64(m.CommandBucketID), 10)
	}
	return string(appendGroupBody(b, m.Type, m.Properties, m.Buckets))
}

func (g *GroupDesc) appendText(b []byte) []byte {
	b = strconv.AppendUint(append(b, "group_id="...), uint64(g.GroupID), 10)
	return appendGroupBody(b, g.Type, g.Properties, g.Buckets)
}

// appendGroupBody appends what follows a group's ID in its text: its type,
// its selection method (the one property ovs-ofctl prints), and buckets.
func appendGroupBody(b []byte, typ GroupType, props []byte, buckets []Bucket) []byte {
	b = append(append(b, ",type="...), typ.String()...)
	b = appendSelectionMethod(b, props)
	for i := range buckets {
		b = buckets[i].appendText(append(b, ",bucket="...))
	}
	return b
}

// String returns the bucket as ovs-ofctl prints it inside a group.
func (k *Bucket) String() string { return string(k.appendText(nil)) }

func (k *Bucket) appendText(b []byte) []byte {
	b = strconv.AppendUint(append(b, "bucket_id:"...), uint64(k.ID), 10)
	// As Open vSwitch, which leaves out the default weight.
	if k.Weight > 1 {
		b = strconv.AppendUint(append(b, ",weight:"...), uint64(k.Weight), 10)
	}
	if k.WatchPort != 0 {
		b = append(append(b, ",watch_port:"...), PortName(k.WatchPort)...)
	}
	if k.WatchGroup != 0 {
		b = strconv.AppendUint(append(b, ",watch_group:"...), uint64(k.WatchGroup), 10)
	}
	b = append(b, ",actions="...)
	if len(k.Actions) == 0 {
		return append(b, "drop"...)
	}
	return appendActionList(b, k.Actions)
}

// The group property of Open vSwitch's selection method extension (the
// Netronome experimenter's NTRT_SELECTION_METHOD, OFPGPT15_EXPERIMENTER).
const (
	groupPropExperimenter  = 0xffff
	ntrExperimenterID      = 0x0000154d
	ntrTypeSelectionMethod = 1
	selectionMethodLen     = 16 // the method's name, NUL-padded
)

// appendSelectionMethod appends the selection method among a group's
// properties as ovs-ofctl prints it (",selection_method=hash,fields(ip_src,
// tcp_src)", with ",selection_method_param=N" when N is not 0), or nothing
// when there is none or it does not parse.
func appendSelectionMethod(b []byte, props []byte) []byte {
	for len(props) >= 4 {
		typ, n := be.Uint16(props), int(be.Uint16(props[2:]))
		if n < 4 || n > len(props) {
			return b
		}
		prop := props[:n]
		props = props[min(len(props), (n+7)/8*8):]
		const fixed = 12 + 4 + selectionMethodLen + 8
		if typ != groupPropExperimenter || n < fixed || be.Uint32(prop[4:]) != ntrExperimenterID || be.Uint32(prop[8:]) != ntrTypeSelectionMethod {
			continue
		}
		name, _, _ := strings.Cut(string(prop[16:16+selectionMethodLen]), "\x00")
		b = append(append(b, ",selection_method="...), name...)
		if param := be.Uint64(prop[16+selectionMethodLen:]); param != 0 {
			b = strconv.AppendUint(append(b, ",selection_method_param="...), param, 10)
		}
		var names []string
		for rest := prop[fixed:]; len(rest) >= 4; {
			h := be.Uint32(rest)
			f, ok := fieldByHeader[h&^0x100] // a masked header names its field too
			width := int(h & 0xff)
			if h&0x100 != 0 {
				width /= 2 // value and mask; the mask alone follows here
			}
			if !ok || width == 0 || 4+width > len(rest) {
				break
			}
			names = append(names, f.String())
			rest = rest[4+width:]
		}
		if len(names) > 0 {
			b = append(append(append(b, ",fields("...), strings.Join(names, ",")...), ')')
		}
		return b
	}
	return b
}

// HashSelection is the group property (GroupMod.Properties) that has Open
// vSwitch pick a select group's bucket by a hash of fields
// (`selection_method=hash,fields(...)`), so that every packet of one
// connection takes one bucket, as long as the buckets stay. Without it the
// switch picks by its datapath's hash, which this package cannot name.
// The fields are written as the switch describes them back: each as its
// OXM header, then as many bytes of all ones (the part of it hashed).
// A field a packet lacks (udp_src of a TCP segment) is left out of its
// hash.
func HashSelection(fields ...Field) []byte {
	b := be.AppendUint16(nil, groupPropExperimenter)
	b = append(b, 0, 0) // length, below
	b = be.AppendUint32(b, ntrExperimenterID)
	b = be.AppendUint32(b, ntrTypeSelectionMethod)
	b = append(b, 0, 0, 0, 0)
	b = append(b, make([]byte, selectionMethodLen)...)
	copy(b[len(b)-selectionMethodLen:], "hash")
	b = be.AppendUint64(b, 0) // the method's parameter: the hash's basis
	for _, f := range fields {
		width := f.Width()
		b = be.AppendUint32(b, f.Header())
		for range width {
			b = append(b, 0xff)
		}
	}
	be.PutUint16(b[2:], uint16(len(b)))
	for len(b)%8 != 0 {
		b = append(b, 0)
	}
	return b
}
