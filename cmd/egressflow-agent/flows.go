package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"

	"github.com/vishvananda/netlink"

	"github.com/egressflow/egressflow/cmd/internal/cli"
	"github.com/egressflow/egressflow/conntrack"
	esv1 "github.com/egressflow/egressflow/controller/apis/egressservice/v1"
	"github.com/egressflow/egressflow/controller/dataplane"
	"github.com/egressflow/egressflow/controller/iprule"
	"github.com/egressflow/egressflow/openflow"
	"github.com/egressflow/egressflow/openflow/ofconn"
)

// flowsTimeout bounds `egressflow-agent flows`: one dump of a local bridge.
const flowsTimeout = coldGuardTimeout

// flowsUsage is the synopsis of `egressflow-agent flows`, in both
// commands' --help.
const flowsUsage = `egressflow-agent flows (--service NAMESPACE/NAME | --egressip NAME | --firewall NAMESPACE | --qos NAMESPACE) [--bridge br-ex] [--ovs-rundir DIR]
    what one object of the egress APIs holds on this node's bridge: its cookie and
    the ovs-ofctl filter selecting its flows, its flows with their packet counts,
    its conntrack zone; for an EgressService also its ip rules, for an
    EgressFirewall the dnsName answers its flows hold`

// flowsTarget is the object `egressflow-agent flows` shows.
type flowsTarget struct {
	api dataplane.API
	// key is its dataplane.ObjectKey, whose hash its flows' cookies carry.
	key string
	// what names it for people: "EgressService shop/web".
	what string
}

// flowsTargetOf reads the one object flag set.
func flowsTargetOf(service, egressIP, firewall, qos string) (flowsTarget, error) {
	set := 0
	for _, v := range []string{service, egressIP, firewall, qos} {
		if v != "" {
			set++
		}
	}
	if set != 1 {
		return flowsTarget{}, errors.New("exactly one of --service <namespace>/<name>, --egressip <name>, --firewall <namespace> and --qos <namespace> is required")
	}
	switch {
	case service != "":
		if ns, name, ok := strings.Cut(service, "/"); !ok || ns == "" || name == "" {
			return flowsTarget{}, errors.New("--service <namespace>/<name>: a namespace, a slash and a name")
		}
		return flowsTarget{api: dataplane.APIEgressService, key: service, what: "EgressService " + service}, nil
	case egressIP != "":
		if strings.Contains(egressIP, "/") {
			return flowsTarget{}, errors.New("--egressip <name>: an EgressIP is cluster-scoped, it has no namespace")
		}
		return flowsTarget{api: dataplane.APIEgressIP, key: dataplane.ObjectKey(dataplane.APIEgressIP, "", egressIP), what: "EgressIP " + egressIP}, nil
	case firewall != "":
		if strings.Contains(firewall, "/") {
			return flowsTarget{}, errors.New("--firewall <namespace>: a namespace has one EgressFirewall, named default")
		}
		return flowsTarget{api: dataplane.APIEgressFirewall, key: dataplane.ObjectKey(dataplane.APIEgressFirewall, firewall, esv1.EgressFirewallName),
			what: "EgressFirewall " + firewall + "/" + esv1.EgressFirewallName}, nil
	}
	if strings.Contains(qos, "/") {
		return flowsTarget{}, errors.New("--qos <namespace>: a namespace has one EgressQoS, named default")
	}
	return flowsTarget{api: dataplane.APIEgressQoS, key: dataplane.ObjectKey(dataplane.APIEgressQoS, qos, esv1.EgressQoSName),
		what: "EgressQoS " + qos + "/" + esv1.EgressQoSName}, nil
}

// runFlows is `egressflow-agent flows` (flowsUsage): what one object of
// the egress APIs holds on this node, without computing its cookie by
// hand. It prints the object's cookie and the ovs-ofctl filter selecting
// its flows, its flows as `ovs-ofctl -O OpenFlow15 dump-flows` shows them
// (with their packet counts), the filter of its API's shared flows and its
// conntrack zone; for an EgressService, egressflow's ip rules for the
// addresses its flows name (a Network-mode service has no flows: then
// every rule of egressflow's is listed); for an EgressFirewall, the
// addresses its dnsName rules' flows hold, by name. It reads the bridge
// and the node's routing rules only, not the API server.
func runFlows(args []string, out io.Writer) error {
	fs := cli.NewFlags("egressflow-agent flows")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage:\n  %s\n\nFlags:\n", flowsUsage)
		fs.PrintDefaults()
	}
	service := fs.String("service", "", "the EgressService, <namespace>/<name>")
	egressIP := fs.String("egressip", "", "the EgressIP, <name> (cluster-scoped)")
	firewall := fs.String("firewall", "", "the namespace whose EgressFirewall (named default) to show")
	qos := fs.String("qos", "", "the namespace whose EgressQoS (named default) to show")
	bridge := fs.String("bridge", "br-ex", "the Open vSwitch bridge")
	ovsRundir := fs.String("ovs-rundir", "/var/run/openvswitch", "Open vSwitch run directory, holding <bridge>.mgmt")
	if done, err := fs.Parse(args); done || err != nil {
		return err
	}
	target, err := flowsTargetOf(*service, *egressIP, *firewall, *qos)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), flowsTimeout)
	defer cancel()
	client, err := ofconn.Dial(ctx, "unix:"+filepath.Join(*ovsRundir, *bridge+".mgmt"))
	if err != nil {
		return fmt.Errorf("connect to bridge %s: %w", *bridge, err)
	}
	defer client.Close()
	// Kind 0: the mask leaves the kind out, so the filter selects every
	// kind of the object's flows.
	cookie, mask := dataplane.Cookie(0, target.key), dataplane.ServiceCookieMask
	var flows []string
	answers := map[string][]netip.Addr{} // an EgressFirewall's dnsName answers
	var addrs []netip.Addr               // the sources and destinations its flows match
	err = client.DumpFlowsFunc(ctx, &openflow.FlowDescRequest{Table: openflow.TableAll, Cookie: cookie, CookieMask: mask}, func(f *openflow.Flow) error {
		flows = append(flows, f.String())
		if target.api == dataplane.APIEgressFirewall {
			// Read now: the dump may reuse f once this returns.
			for name, a := range dataplane.FirewallAnswers([]openflow.Flow{*f}) {
				answers[name] = append(answers[name], a...)
			}
		}
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
		return fmt.Errorf("dump the flows of %s: %w", target.what, err)
	}
	fmt.Fprintf(out, "%s on bridge %s\n", target.what, *bridge)
	fmt.Fprintf(out, "cookie %#x (flow kind in bits 47..40), mask %#x\n", cookie, mask)
	fmt.Fprintf(out, "  ovs-ofctl -O OpenFlow15 dump-flows %s cookie=%#x/%#x\n", *bridge, cookie, mask)
	fmt.Fprintf(out, "flows (%d):\n", len(flows))
	for _, f := range flows {
		fmt.Fprintf(out, "  %s\n", f)
	}
	if len(flows) == 0 {
		fmt.Fprintf(out, "  none: %s, or the agent has not synced it\n", flowsNoneBecause(target.api))
	}
	switch target.api {
	case dataplane.APIEgressService:
		fmt.Fprintf(out, "shared flows (pod guard, exemptions, fail-closed drop, replies): cookie=%#x/%#x\n", dataplane.Cookie(0, ""), mask)
		fmt.Fprintf(out, "conntrack zone %d (SNAT): ovs-appctl dpctl/dump-conntrack zone=%d\n", conntrack.SNATZone, conntrack.SNATZone)
		return printRules(out, flows, addrs)
	case dataplane.APIEgressIP:
		fmt.Fprintf(out, "every EgressIP's flows: cookie=%#x/%#x\n", target.api.Cookie(), dataplane.APICookieMask)
		fmt.Fprintf(out, "conntrack zone %d (SNAT, shared with EgressService): ovs-appctl dpctl/dump-conntrack zone=%d\n", conntrack.SNATZone, conntrack.SNATZone)
	case dataplane.APIEgressFirewall:
		fmt.Fprintf(out, "every EgressFirewall's flows: cookie=%#x/%#x; table %d: ovs-ofctl -O OpenFlow15 dump-flows %s table=%d\n",
			target.api.Cookie(), dataplane.APICookieMask, dataplane.TableFirewall, *bridge, dataplane.TableFirewall)
		fmt.Fprintf(out, "conntrack zone %d (connections its pods open): ovs-appctl dpctl/dump-conntrack zone=%d\n", conntrack.FirewallZone, conntrack.FirewallZone)
		fmt.Fprintf(out, "dnsName answers its flows hold (%d names):\n", len(answers))
		for _, name := range slices.Sorted(maps.Keys(answers)) {
			a := slices.Compact(slices.SortedFunc(slices.Values(answers[name]), netip.Addr.Compare))
			fmt.Fprintf(out, "  %s: %s\n", name, joinAddrs(a))
		}
	case dataplane.APIEgressQoS:
		fmt.Fprintf(out, "every EgressQoS's flows: cookie=%#x/%#x; table %d: ovs-ofctl -O OpenFlow15 dump-flows %s table=%d\n",
			target.api.Cookie(), dataplane.APICookieMask, dataplane.TableQoS, *bridge, dataplane.TableQoS)
	}
	return nil
}

// flowsNoneBecause says why a node may hold no flow of an object of api.
func flowsNoneBecause(api dataplane.API) string {
	switch api {
	case dataplane.APIEgressIP:
		return "this node holds none of its addresses and runs none of its pods (or it does not exist)"
	case dataplane.APIEgressFirewall, dataplane.APIEgressQoS:
		return "no pod of the namespace runs on this node, it has no rule this node can apply (or it does not exist)"
	}
	return "this node does not act on the service (no host, no endpoint, another mode)"
}

func joinAddrs(addrs []netip.Addr) string {
	if len(addrs) == 0 {
		return "no address"
	}
	s := make([]string, len(addrs))
	for i, a := range addrs {
		s[i] = a.String()
	}
	return strings.Join(s, ", ")
}

// printRules prints egressflow's ip rules for an EgressService whose flows
// name addrs: those of its sources, or every one when it has no flow
// (Network mode).
func printRules(out io.Writer, flows []string, addrs []netip.Addr) error {
	handle, err := netlink.NewHandle()
	if err != nil {
		return err
	}
	defer handle.Close()
	rules, err := iprule.NewManager(handle, "").Installed()
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
