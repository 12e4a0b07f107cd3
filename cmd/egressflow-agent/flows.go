package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"

	"github.com/vishvananda/netlink"

	"github.com/egressflow/egressflow/cmd/internal/cli"
	"github.com/egressflow/egressflow/conntrack"
	"github.com/egressflow/egressflow/controller/dataplane"
	"github.com/egressflow/egressflow/controller/iprule"
	"github.com/egressflow/egressflow/openflow"
)

// flowsTimeout bounds `egressflow-agent flows`: one dump of a local bridge.
const flowsTimeout = coldGuardTimeout

// runFlows is `egressflow-agent flows --service <namespace>/<name>`: what
// one EgressService holds on this node, without computing its cookie by
// hand. It prints the service's cookie and the ovs-ofctl filter selecting
// its flows, its flows as `ovs-ofctl -O OpenFlow15 dump-flows` shows them
// (with their packet counts), the conntrack zone of its SNAT, and
// egressflow's ip rules for the addresses its flows name (a Network-mode
// service has no flows: then every rule of egressflow's is listed). It
// reads the bridge and the node's routing rules only, not the API server.
func runFlows(args []string, out io.Writer) error {
	fs := cli.NewFlags("egressflow-agent flows")
	service := fs.String("service", "", "the EgressService, <namespace>/<name> (required)")
	bridge := fs.String("bridge", "br-ex", "the Open vSwitch bridge")
	ovsRundir := fs.String("ovs-rundir", "/var/run/openvswitch", "Open vSwitch run directory, holding <bridge>.mgmt")
	if done, err := fs.Parse(args); done || err != nil {
		return err
	}
	if ns, name, ok := strings.Cut(*service, "/"); !ok || ns == "" || name == "" {
		return errors.New("--service <namespace>/<name> is required")
	}
	ctx, cancel := context.WithTimeout(context.Background(), flowsTimeout)
	defer cancel()
	client, err := openflow.Dial(ctx, "unix:"+filepath.Join(*ovsRundir, *bridge+".mgmt"))
	if err != nil {
		return fmt.Errorf("connect to bridge %s: %w", *bridge, err)
	}
	defer client.Close()
	// Kind 0: the mask leaves the kind out, so the filter selects every
	// kind of the service's flows.
	cookie, mask := dataplane.Cookie(0, *service), dataplane.ServiceCookieMask
	var flows []string
	var addrs []netip.Addr // the sources and destinations its flows match
	err = client.DumpFlowsFunc(ctx, &openflow.FlowDescRequest{Table: openflow.TableAll, Cookie: cookie, CookieMask: mask}, func(f *openflow.Flow) error {
		flows = append(flows, f.String())
		for _, field := range []openflow.Field{openflow.FieldIPv4Src, openflow.FieldIPv6Src, openflow.FieldIPv4Dst, openflow.FieldIPv6Dst} {
			if v, _, ok := f.Match.Get(field); ok {
				if a, ok := netip.AddrFromSlice(v); ok {
					addrs = append(addrs, a.Unmap())
				}
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("dump the flows of %s: %w", *service, err)
	}
	fmt.Fprintf(out, "EgressService %s on bridge %s\n", *service, *bridge)
	fmt.Fprintf(out, "cookie %#x (flow kind in bits 47..40), mask %#x\n", cookie, mask)
	fmt.Fprintf(out, "  ovs-ofctl -O OpenFlow15 dump-flows %s cookie=%#x/%#x\n", *bridge, cookie, mask)
	fmt.Fprintf(out, "flows (%d):\n", len(flows))
	for _, f := range flows {
		fmt.Fprintf(out, "  %s\n", f)
	}
	if len(flows) == 0 {
		fmt.Fprintln(out, "  none: this node does not act on the service (no host, no endpoint, another mode), or the agent has not synced it")
	}
	fmt.Fprintf(out, "shared flows (pod guard, exemptions, fail-closed drop, replies): cookie=%#x/%#x\n", dataplane.Cookie(0, ""), mask)
	fmt.Fprintf(out, "conntrack zone %d (SNAT): ovs-appctl dpctl/dump-conntrack zone=%d\n", conntrack.SNATZone, conntrack.SNATZone)
	handle, err := netlink.NewHandle()
	if err != nil {
		return err
	}
	defer handle.Close()
	rules, err := iprule.NewManager(handle).Installed()
	if err != nil {
		return err
	}
	if len(flows) > 0 {
		rules = slices.DeleteFunc(rules, func(r dataplane.Rule) bool {
			return r.Kind == dataplane.RouteRule && !slices.Contains(addrs, r.Source)
		})
	}
	fmt.Fprintf(out, "ip rules of egressflow (priorities %d-%d) for it:\n", dataplane.ExemptRulePriority, dataplane.LandingRulePriority)
	for _, r := range rules {
		fmt.Fprintf(out, "  %s\n", r)
	}
	return nil
}
