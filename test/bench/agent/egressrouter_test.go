package agent

import (
	"context"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nov1 "github.com/egressflow/egressflow/controller/apis/networkoperator/v1"
	"github.com/egressflow/egressflow/controller/dataplane"
	"github.com/egressflow/egressflow/openflow"
	"github.com/egressflow/egressflow/test/ovstest"
	"github.com/egressflow/egressflow/test/wait"
)

var (
	routerCount = flag.Int("routers", 100, "EgressRouters the benchmarked node holds, each with an IPv4 and an IPv6 address: its share of 1,000 routers over 10 egress nodes (BenchmarkAgentEgressRouter)")
	routerRules = flag.Int("router-rules", 10, "redirect rules of each router, half to IPv4 destinations and half to IPv6 ones, TCP and UDP in turn (BenchmarkAgentEgressRouter)")
	routerMoves = flag.Int("router-moves", 20, "routers moved to the node (status.holder), timed for p50/p99 (BenchmarkAgentEgressRouter)")
)

// routerBenchNamespace holds the benchmark's routers.
const routerBenchNamespace = "routers"

// benchRouter is router i: reserved addresses of its own, rules to
// destinations of both families, a fallback of each.
func benchRouter(i int) *nov1.EgressRouter {
	v4 := netip.AddrFrom4([4]byte{100, 64 + byte(i>>16), byte(i >> 8), byte(i)})
	v6 := netip.MustParseAddr(fmt.Sprintf("fd00:64::%x", i+1))
	r := &nov1.EgressRouter{
		ObjectMeta: metav1.ObjectMeta{Namespace: routerBenchNamespace, Name: fmt.Sprintf("router-%05d", i)},
		Spec: nov1.EgressRouterSpec{
			Mode:             nov1.EgressRouterModeRedirect,
			NetworkInterface: nov1.EgressRouterInterface{Macvlan: nov1.MacvlanConfig{Mode: nov1.MacvlanModeBridge}},
			Addresses:        []nov1.EgressRouterAddress{{IP: netip.PrefixFrom(v4, 10).String()}, {IP: netip.PrefixFrom(v6, 64).String()}},
			Redirect:         &nov1.RedirectConfig{FallbackIP: "203.0.113.1"},
		},
	}
	for k := range *routerRules {
		dst := fmt.Sprintf("198.51.100.%d", k+1)
		if k%2 == 1 {
			dst = fmt.Sprintf("2001:db8:64::%x", k+1)
		}
		protocol := nov1.ProtocolTypeTCP
		if k%4 >= 2 {
			protocol = nov1.ProtocolTypeUDP
		}
		r.Spec.Redirect.RedirectRules = append(r.Spec.Redirect.RedirectRules,
			nov1.L4RedirectRule{DestinationIP: dst, Port: int32(1000 + k), Protocol: protocol, TargetPort: int32(2000 + k)})
	}
	return r
}

// createRouters creates routers [from, to), each with holder as
// status.holder.
func (e *env) createRouters(b *testing.B, from, to int, holder string) {
	ctx := context.Background()
	routers := e.adminES.NetworkOperatorV1().EgressRouters(routerBenchNamespace)
	wait.Parallel(b, to-from, *setupWorkers, func(k int) error {
		r, err := routers.Create(ctx, benchRouter(from+k), metav1.CreateOptions{})
		if err != nil {
			return err
		}
		return e.setHolder(r, holder)
	})
}

// setHolder writes r's status.holder, as the cluster component would.
func (e *env) setHolder(r *nov1.EgressRouter, holder string) error {
	r = r.DeepCopy()
	r.Status = nov1.EgressRouterStatus{Holder: holder, Conditions: []nov1.EgressRouterStatusCondition{}}
	_, err := e.adminES.NetworkOperatorV1().EgressRouters(routerBenchNamespace).UpdateStatus(context.Background(), r, metav1.UpdateOptions{})
	return err
}

// routerFlowCount is the count of a router's flows from
// docs/egressrouter.md and docs/dataplane.md, per reserved address: the
// entry, the redirects' drop, the responders (the ARP request and
// gratuitous ARP's pass; or the solicitation, duplicate address
// detection's pass and the advertisement), the conntrack lookup, the
// reply and forward flows, a flow per rule of the address's family, the
// fallback, the established connections, the SNAT and two outputs.
func routerFlowCount(rules4, rules6 int) int {
	const perAddress = 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 2 // without responders and rules
	return perAddress + 2 + rules4 + perAddress + 3 + rules6
}

func BenchmarkAgentEgressRouter(b *testing.B) {
	ovstest.RequireRoot(b)
	logs := captureKlog()
	out := func(format string, args ...any) { fmt.Fprintf(os.Stdout, format+"\n", args...) }
	if *routerCount < 1 || *routerRules < 0 || *rounds < 1 || *routerMoves < 1 {
		b.Fatal("-routers, -rounds and -router-moves must be positive")
	}
	benchStart := time.Now()
	e := newEnv(b)
	out("EgressRouter bench: %d routers held by %s, each 2 addresses (IPv4, IPv6) x %d rules", *routerCount, benchNode, *routerRules)
	ctx := context.Background()
	if _, err := e.admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: routerBenchNamespace}}, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	t0 := time.Now()
	e.createRouters(b, 0, *routerCount, benchNode)
	out("setup: %d routers created with their holder in %v", *routerCount, time.Since(t0).Round(time.Millisecond))

	e.clearFlows(b)
	warm := e.startAgent(b, logs, true)
	warm.waitHealthy(b)
	flowSet := warm.sw.firstBundle()
	warm.stop()
	routerFlows := 0
	for _, fm := range flowSet {
		if c, _ := dataplane.DecodeCookie(fm.Cookie); c.Kind.API() == dataplane.APIEgressRouter {
			routerFlows++
		}
	}
	rules6 := *routerRules / 2
	want := *routerCount * routerFlowCount(*routerRules-rules6, rules6)
	if routerFlows != want {
		b.Fatalf("%d router flows in the agent's first bundle, the count is %d", routerFlows, want)
	}
	wantFlows := len(flowSet) + 1 // the marker stays on a cleared bridge
	bundleFile := ovstest.WriteBundleFile(b, []*openflow.GroupMod(nil), flowSet)
	out("flow set: %d flows, of which the routers' %d (= the count: %d per router)", wantFlows, routerFlows, routerFlows / *routerCount)

	full := e.compareFullSync(b, logs, fullSyncRounds{
		flowMods: len(flowSet),
		install:  func() time.Duration { return e.sw.Bundle(b, bundleFile) },
		check:    func(string) { e.expectFlowCount(b, wantFlows) },
	})
	syncMed, ofctlMed, ratio, last := full.sync, full.ofctl, full.ratio, full.last

	last.stop()
	restarted := e.startAgent(b, logs, false)
	restartHealthy := restarted.waitHealthy(b)
	time.Sleep(restartSettle)
	restartMods := restarted.sw.mods.Load()
	e.expectFlowCount(b, wantFlows)
	out("restart with everything in place: %d flow mods; healthy %v after start", restartMods, restartHealthy.Sub(restarted.started).Round(time.Millisecond))

	// Routers held elsewhere move here: from the status write to the
	// bundle with the router's flows acknowledged.
	moving := *routerCount + 1_000
	e.createRouters(b, moving, moving+latencyWarmup+*routerMoves, "other-node")
	var moves []time.Duration
	routers := e.adminES.NetworkOperatorV1().EgressRouters(routerBenchNamespace)
	for k := range latencyWarmup + *routerMoves {
		r, err := routers.Get(ctx, benchRouter(moving+k).Name, metav1.GetOptions{})
		if err != nil {
			b.Fatal(err)
		}
		key := dataplane.ObjectKey(dataplane.APIEgressRouter, routerBenchNamespace, r.Name)
		w := newFlowWatch(func(fm *openflow.FlowMod) bool {
			return fm.Cookie&dataplane.ServiceCookieMask == dataplane.Cookie(dataplane.KindRouterEntry, key)&dataplane.ServiceCookieMask
		})
		d := w.await(b, restarted.sw, "a moved router's flows", func() error { return e.setHolder(r, benchNode) })
		if k >= latencyWarmup {
			moves = append(moves, d)
		}
	}
	restarted.stop()
	out("a router moved here (status.holder) -> its flows in an acknowledged bundle (%d samples): p50 %v, p99 %v",
		len(moves), percentile(moves, 50).Round(100*time.Microsecond), percentile(moves, 99).Round(100*time.Microsecond))
	out("total bench time %v", time.Since(benchStart).Round(time.Second))

	out("")
	out("%-66s %14s", fmt.Sprintf("EgressRouter bench, %d routers x %d rules on one holder", *routerCount, *routerRules), "value")
	out("%s", strings.Repeat("-", 81))
	row := func(name, value string) { out("%-66s %14s", name, value) }
	row("flows in the full set", strconv.Itoa(wantFlows))
	row("  of which the routers' (= the count)", strconv.Itoa(routerFlows))
	row("full sync, agent: sync start to Healthy, median (s)", secs(syncMed))
	row("same flows, ovs-ofctl bundle, median (s)", secs(ofctlMed))
	row("ratio agent / ovs-ofctl", fmt.Sprintf("%.2f", ratio))
	row("restart, everything in place: mods", strconv.FormatInt(restartMods, 10))
	row("router moved here -> flows acked, p50 (ms)", ms(percentile(moves, 50)))
	row("router moved here -> flows acked, p99 (ms)", ms(percentile(moves, 99)))

	b.ReportMetric(float64(wantFlows), "flows")
	b.ReportMetric(ratio, "ratio-vs-ofctl")
	b.ReportMetric(float64(percentile(moves, 99).Microseconds())/1000, "move-p99-ms")
	b.ReportMetric(0, "ns/op")
}
