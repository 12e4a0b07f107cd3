package agent

import (
	"context"
	"maps"
	"net"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/egressflow/egressflow/controller/dataplane"
	"github.com/egressflow/egressflow/openflow"
	"github.com/egressflow/egressflow/openflow/ofconn"
	"github.com/egressflow/egressflow/test/ovstest"
)

// mapDesired is a Desired that is a map of parts.
type mapDesired map[string]dataplane.Part

func (d mapDesired) Part(key string) (dataplane.Part, bool) {
	part, ok := d[key]
	return part, ok
}
func (d mapDesired) Keys() []string           { return slices.Sorted(maps.Keys(d)) }
func (d mapDesired) Shared() dataplane.Shared { return dataplane.Shared{} }

// TestLedgerGroupsOnSwitch applies parts that use groups to a real switch
// through the ledger and the agent's bundle stream: the groups and the
// flows that use them arrive in one bundle that the switch accepts; a
// restarted agent that reads the bridge finds them as it would send them,
// and sends nothing; a bucket changed is a modify, a part gone takes its
// flow and then its group; another controller's group is never touched,
// and the uninstall removes egressflow's groups and only those.
func TestLedgerGroupsOnSwitch(t *testing.T) {
	sw := ovstest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	client, err := ofconn.Dial(ctx, "unix:"+sw.MgmtSocket)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	ofsw := OpenFlowSwitch{Client: client}
	sw.Ofctl(t, "add-group", sw.Bridge, "group_id=5,type=indirect,bucket=bucket_id:0,actions=output:9")
	foreign := "group_id=5,type=indirect,bucket=bucket_id:0,actions=output:9"
	ports := dataplane.Ports{Uplink: 1}

	agent := &Agent{cfg: Config{Switch: ofsw}}
	ledger := dataplane.NewLedger()
	// sync is the agent's apply step; it returns how many messages the
	// bundle carried.
	sync := func(step string, desired mapDesired, changed ...string) int {
		t.Helper()
		ledger.Changed(desired, changed)
		var bridge *dataplane.Installed
		if ledger.NeedsRead(ports) {
			read := agent.readBridge(ctx)
			if read.err != nil {
				t.Fatalf("%s: %v", step, read.err)
			}
			bridge = read.installed
		}
		stream := bundleStream{sw: ofsw}
		d, err := ledger.Diff(desired, ports, bridge, dataplane.DiffOutput{
			Send: func(c *dataplane.Changes) error { return stream.add(ctx, c) },
			Dump: func(fn func(openflow.FlowEntry) error) error {
				return ofsw.DumpFlows(ctx, dataplane.CookiePrefix, dataplane.CookiePrefixMask, fn)
			},
		})
		if err == nil {
			err = stream.commit(ctx)
		}
		if err != nil {
			t.Fatalf("%s: %v", step, err)
		}
		ledger.Commit(d)
		ledger.Flushed()
		return stream.sent
	}
	// check compares the bridge's groups, and its flows that use one,
	// with those of the parts (and the foreign group).
	check := func(step string, desired mapDesired) {
		t.Helper()
		var parts []toyPart
		for _, part := range desired {
			parts = append(parts, part.(toyPart))
		}
		if err := toyBridgeDiffers(t, sw, sw.Bridge, parts, ports, foreign); err != nil {
			t.Fatalf("%s: %v", step, err)
		}
	}

	// Parts of the toy member (member_test.go), which use groups as next
	// hops would: a select group, and a fast-failover one.
	mac := func(last byte) net.HardwareAddr { return net.HardwareAddr{0x0a, 0, 0, 0, 0, last} }
	ecmp := toyPart{key: dataplane.ObjectKey(toyAPI, "shop", "a"), group: dataplane.GroupIDPrefix | 1,
		source: netip.MustParseAddr("10.244.1.5"), hops: []net.HardwareAddr{mac(1), mac(2)}}
	failover := toyPart{key: dataplane.ObjectKey(toyAPI, "shop", "b"), group: dataplane.GroupIDPrefix | 2, failover: true,
		source: netip.MustParseAddr("10.244.1.6"), hops: []net.HardwareAddr{mac(3), mac(4)}}
	desired := mapDesired{ecmp.key: ecmp, failover.key: failover}
	if sent := sync("first sync", desired, ecmp.key, failover.key); sent == 0 {
		t.Fatal("first sync sent nothing")
	}
	check("first sync", desired)

	// A restarted agent: a new ledger reads the bridge, and finds every
	// group and flow as it would send it.
	ledger = dataplane.NewLedger()
	if sent := sync("after a restart", desired, desired.Keys()...); sent != 0 {
		t.Errorf("after a restart the sync sent %d messages, want 0: the bridge describes the groups otherwise than they are sent", sent)
	}
	check("after a restart", desired)

	// A next hop added: the group is modified in place.
	ecmp.hops = append(ecmp.hops, mac(5))
	desired[ecmp.key] = ecmp
	if sent := sync("next hop added", desired, ecmp.key); sent != 1 {
		t.Errorf("a next hop added sent %d messages, want 1 (the group modified)", sent)
	}
	check("next hop added", desired)

	// A part gone: its flow, then its group.
	delete(desired, failover.key)
	sync("part gone", desired, failover.key)
	check("part gone", desired)

	// A stale group of egressflow's (a predecessor's) goes at the next
	// read of the bridge; the foreign one stays.
	sw.Ofctl(t, "add-group", sw.Bridge, "group_id=4009754700,type=indirect,bucket=bucket_id:0,actions=output:3")
	ledger.Forget()
	sync("stale group", desired)
	check("stale group", desired)

	if err := Uninstall(ctx, ofsw, noRules{}, nil, nil); err != nil {
		t.Fatalf("Uninstall: %v", err)
	}
	check("after the uninstall: only the foreign group", mapDesired{})
}

// noRules is a node without policy-routing rules or routes.
type noRules struct{}

func (noRules) Sync([]dataplane.Rule) (int, int, error)        { return 0, 0, nil }
func (noRules) SyncRoutes([]dataplane.Route) (int, int, error) { return 0, 0, nil }
