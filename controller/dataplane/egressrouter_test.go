package dataplane

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"reflect"
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nov1 "github.com/egressflow/egressflow/controller/apis/networkoperator/v1"
)

// randomRouter is a router of namespace shop: its holder one of a few
// nodes or none, its spec valid or, one time in five, broken in one of
// the ways Read refuses.
func randomRouter(r *rand.Rand, name string) *nov1.EgressRouter {
	router := &nov1.EgressRouter{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name},
		Spec: nov1.EgressRouterSpec{
			Mode:      nov1.EgressRouterModeRedirect,
			Addresses: []nov1.EgressRouterAddress{{IP: fmt.Sprintf("192.0.2.%d/24", 1+r.IntN(200))}},
			Redirect:  &nov1.RedirectConfig{},
		},
		Status: nov1.EgressRouterStatus{Holder: []string{"", "node-a", "node-b"}[r.IntN(3)]},
	}
	if r.IntN(2) == 0 {
		router.Spec.Addresses = append(router.Spec.Addresses, nov1.EgressRouterAddress{IP: fmt.Sprintf("2001:db8::%x/64", 1+r.IntN(200))})
	}
	for i := range router.Spec.Addresses {
		if r.IntN(3) == 0 {
			router.Spec.Addresses[i].Gateway = []string{"192.0.2.254", "fe80::1"}[i]
		}
	}
	for i := range r.IntN(4) {
		protocol := []nov1.ProtocolType{nov1.ProtocolTypeTCP, nov1.ProtocolTypeUDP, nov1.ProtocolTypeSCTP}[r.IntN(3)]
		router.Spec.Redirect.RedirectRules = append(router.Spec.Redirect.RedirectRules, nov1.L4RedirectRule{
			DestinationIP: fmt.Sprintf("203.0.113.%d", 1+r.IntN(50)), Port: int32(1000 + i), Protocol: protocol, TargetPort: int32(r.IntN(2) * 8080)})
	}
	if r.IntN(2) == 0 || len(router.Spec.Redirect.RedirectRules) == 0 {
		router.Spec.Redirect.FallbackIP = "198.51.100.7"
	}
	switch r.IntN(15) {
	case 0:
		router.Spec.Redirect = nil
	case 1:
		router.Spec.Addresses[0].IP = "192.0.2.1" // no prefix length
	case 2:
		router.Spec.Redirect.FallbackIP = "2001:db8:ff::1" // may lack an IPv6 address
	}
	return router
}

// expectedRouterPart is what node must render for router, written from the
// spec as the API documents it (not through Read): a part only on the
// holder, unfenced, for a router whose addresses have their prefix
// lengths, whose destinations each have an address of their family, and
// which has a redirect; its gateways those of the addresses that name one.
func expectedRouterPart(node string, fenced bool, key string, router *nov1.EgressRouter) (RouterPart, bool) {
	if router == nil || router.Status.Holder != node || fenced || router.Spec.Redirect == nil {
		return RouterPart{}, false
	}
	part := RouterPart{Key: key}
	families := map[bool]bool{}
	for _, a := range router.Spec.Addresses {
		prefix, err := netip.ParsePrefix(a.IP)
		if err != nil {
			return RouterPart{}, false
		}
		part.Addresses = append(part.Addresses, prefix.Addr())
		families[prefix.Addr().Is4()] = true
		if a.Gateway != "" {
			part.Gateways = append(part.Gateways, RouterGateway{Address: prefix, Gateway: netip.MustParseAddr(a.Gateway)})
		}
	}
	numbers := map[nov1.ProtocolType]uint8{nov1.ProtocolTypeTCP: 6, nov1.ProtocolTypeUDP: 17, nov1.ProtocolTypeSCTP: 132}
	for _, rule := range router.Spec.Redirect.RedirectRules {
		dst := netip.MustParseAddr(rule.DestinationIP)
		if !families[dst.Is4()] {
			return RouterPart{}, false
		}
		target := uint16(rule.TargetPort)
		if target == 0 {
			target = uint16(rule.Port)
		}
		part.Rules = append(part.Rules, RouterRule{Protocol: numbers[rule.Protocol], Port: uint16(rule.Port), TargetPort: target, Destination: dst})
	}
	if f := router.Spec.Redirect.FallbackIP; f != "" {
		part.Fallback = netip.MustParseAddr(f)
		if !families[part.Fallback.Is4()] {
			return RouterPart{}, false
		}
	}
	return part, true
}

// TestRouterMemberMatchesSpecification runs random histories of routers
// (created, changed, moved between holders, broken, deleted) and fencing
// through node-a's member, and checks after every step that each router's
// part is what expectedRouterPart says, that the member reports the key it
// was given as changed, and that the parts' IDs are never 0, never shared,
// and kept while a router keeps its part (its flows are not renumbered by
// others' changes).
func TestRouterMemberMatchesSpecification(t *testing.T) {
	for seed := range uint64(200) {
		r := rand.New(rand.NewPCG(seed, 31))
		m := NewRouterMember("node-a").(*routerMember)
		routers := map[string]*nov1.EgressRouter{}
		fenced := false
		ids := map[string]uint32{}
		for step := range 60 {
			name := fmt.Sprintf("r%d", r.IntN(8))
			key := ObjectKey(APIEgressRouter, "shop", name)
			switch r.IntN(10) {
			case 0:
				fenced = !fenced
				m.SetFenced(fenced)
			case 1, 2:
				delete(routers, key)
				if changed := m.Update(key, nil); !slices.Contains(changed, key) {
					t.Fatalf("seed %d step %d: deleting %s changed %v", seed, step, key, changed)
				}
			default:
				routers[key] = randomRouter(r, name)
				if changed := m.Update(key, routers[key]); !slices.Contains(changed, key) {
					t.Fatalf("seed %d step %d: updating %s changed %v", seed, step, key, changed)
				}
			}
			taken := map[uint32]string{}
			for i := range 8 {
				k := ObjectKey(APIEgressRouter, "shop", fmt.Sprintf("r%d", i))
				want, wantOK := expectedRouterPart("node-a", fenced, k, routers[k])
				got, ok := m.Part(k)
				if ok != wantOK {
					t.Fatalf("seed %d step %d: %s has a part: %v, want %v (router %+v, fenced %v)", seed, step, k, ok, wantOK, routers[k], fenced)
				}
				if !ok {
					delete(ids, k)
					continue
				}
				part := got.(RouterPart)
				if part.ID == 0 || taken[part.ID] != "" {
					t.Fatalf("seed %d step %d: %s has ID %d, also %q's", seed, step, k, part.ID, taken[part.ID])
				}
				taken[part.ID] = k
				if old, had := ids[k]; had && old != part.ID {
					t.Fatalf("seed %d step %d: %s's ID moved from %d to %d", seed, step, k, old, part.ID)
				}
				ids[k] = part.ID
				want.ID = part.ID
				if !part.Equal(want) || !slices.Equal(part.Gateways, want.Gateways) {
					t.Fatalf("seed %d step %d: %s's part\n%+v\nwant\n%+v", seed, step, k, part, want)
				}
			}
		}
	}
}

// TestRouterRefusals: an address is refused on the ports its family's
// rules do not name, by protocol, unless a fallback of its family takes
// them; rules of the other family do not count; a port two rules name is
// listed once; the member lists its parts' refusals by address.
func TestRouterRefusals(t *testing.T) {
	a := netip.MustParseAddr
	part := RouterPart{
		Key:       "EgressRouter/shop/billing",
		Addresses: []netip.Addr{a("172.18.0.60"), a("fd00:172:18::60")},
		Rules: []RouterRule{
			{Protocol: 6, Port: 443, TargetPort: 8443, Destination: a("203.0.113.1")},
			{Protocol: 6, Port: 80, Destination: a("203.0.113.1")},
			{Protocol: 6, Port: 80, Destination: a("203.0.113.2")},
			{Protocol: 17, Port: 53, Destination: a("2001:db8::53")},
		},
	}
	want := []RouterRefusal{
		{Address: a("172.18.0.60"), Ports: map[uint8][]uint16{6: {80, 443}}},
		{Address: a("fd00:172:18::60"), Ports: map[uint8][]uint16{17: {53}}},
	}
	if got := part.Refusals(); !reflect.DeepEqual(got, want) {
		t.Errorf("no fallback: %+v, want %+v", got, want)
	}
	part.Fallback = a("203.0.113.9")
	if got := part.Refusals(); !reflect.DeepEqual(got, want[1:]) {
		t.Errorf("an IPv4 fallback: %+v, want the IPv6 address's alone %+v", got, want[1:])
	}
	part.Fallback = a("2001:db8::9")
	if got := part.Refusals(); !reflect.DeepEqual(got, want[:1]) {
		t.Errorf("an IPv6 fallback: %+v, want the IPv4 address's alone %+v", got, want[:1])
	}

	m := NewRouterMember("node-a").(*routerMember)
	for _, r := range []struct{ name, addr string }{{"b", "172.18.0.62"}, {"a", "172.18.0.61"}} {
		m.Update(ObjectKey(APIEgressRouter, "shop", r.name), &nov1.EgressRouter{
			ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: r.name},
			Spec: nov1.EgressRouterSpec{Mode: nov1.EgressRouterModeRedirect,
				NetworkInterface: nov1.EgressRouterInterface{Macvlan: nov1.MacvlanConfig{Mode: nov1.MacvlanModeBridge}},
				Addresses:        []nov1.EgressRouterAddress{{IP: r.addr + "/24"}},
				Redirect: &nov1.RedirectConfig{RedirectRules: []nov1.L4RedirectRule{
					{DestinationIP: "203.0.113.1", Port: 22, Protocol: nov1.ProtocolTypeTCP}}}},
			Status: nov1.EgressRouterStatus{Holder: "node-a"},
		})
	}
	got := m.Refusals()
	if len(got) != 2 || got[0].Address != a("172.18.0.61") || got[1].Address != a("172.18.0.62") || !slices.Equal(got[0].Ports[6], []uint16{22}) {
		t.Errorf("member's refusals %+v, want 172.18.0.61's then 172.18.0.62's, TCP 22 named", got)
	}
	m.SetFenced(true)
	if got := m.Refusals(); len(got) != 0 {
		t.Errorf("a fenced node serves no router, yet refuses %+v", got)
	}
}

// TestRouterRouting: each subnet and gateway has a table of its own in
// egressflow's range, holding the subnet on the link and a default route
// through the gateway; addresses that share both share the table; the
// rules send each address to its table; two keys whose hashes share a
// slot get different tables, the later one the next slot.
func TestRouterRouting(t *testing.T) {
	p, a := netip.MustParsePrefix, netip.MustParseAddr
	rules, routes := RouterRouting([]RouterGateway{
		{Address: p("192.0.2.10/24"), Gateway: a("192.0.2.1")},
		{Address: p("192.0.2.11/24"), Gateway: a("192.0.2.1")},
		{Address: p("192.0.2.12/24"), Gateway: a("192.0.2.254")},
		{Address: p("2001:db8::10/64"), Gateway: a("fe80::1")},
	})
	tableOf := map[netip.Addr]int{}
	for _, r := range rules {
		if r.Kind != RouteRule {
			t.Fatalf("rule %s is not a route rule", r)
		}
		tableOf[r.Source] = r.Table
	}
	if len(rules) != 4 || len(tableOf) != 4 {
		t.Fatalf("rules %v: want one for each of the four addresses", rules)
	}
	shared, other, v6 := tableOf[a("192.0.2.10")], tableOf[a("192.0.2.12")], tableOf[a("2001:db8::10")]
	if tableOf[a("192.0.2.11")] != shared || other == shared || v6 == shared || v6 == other {
		t.Fatalf("tables %v: want 192.0.2.10 and .11 sharing one, .12 and the IPv6 address one each", tableOf)
	}
	for _, table := range []int{shared, other, v6} {
		if !IsRouterTable(table) {
			t.Errorf("table %d outside egressflow's range", table)
		}
	}
	want := []Route{
		{Table: shared, Destination: p("192.0.2.0/24")}, {Table: shared, Destination: p("0.0.0.0/0"), Gateway: a("192.0.2.1")},
		{Table: other, Destination: p("192.0.2.0/24")}, {Table: other, Destination: p("0.0.0.0/0"), Gateway: a("192.0.2.254")},
		{Table: v6, Destination: p("2001:db8::/64")}, {Table: v6, Destination: p("::/0"), Gateway: a("fe80::1")},
	}
	slices.SortFunc(want, Route.Compare)
	if !slices.Equal(routes, want) {
		t.Errorf("routes\n%v\nwant\n%v", routes, want)
	}

	// Find two gateways of one subnet whose tables' hashes share a slot.
	slotOf := map[uint32]int{}
	for i := 1; ; i++ {
		gw := netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)})
		slot := ServiceHash("10.0.0.0/8 via "+gw.String()) % RouterTables
		j, seen := slotOf[slot]
		if !seen {
			slotOf[slot] = i
			continue
		}
		first := netip.AddrFrom4([4]byte{10, byte(j >> 16), byte(j >> 8), byte(j)})
		rules, _ := RouterRouting([]RouterGateway{{Address: p("10.255.255.1/8"), Gateway: gw}, {Address: p("10.255.255.2/8"), Gateway: first}})
		// Sorted by gateway, first comes first and takes the slot.
		byAddr := map[netip.Addr]int{rules[0].Source: rules[0].Table, rules[1].Source: rules[1].Table}
		if byAddr[a("10.255.255.2")] != RouterTableBase+int(slot) || byAddr[a("10.255.255.1")] != RouterTableBase+int((slot+1)%RouterTables) {
			t.Errorf("gateways %s and %s share slot %d: tables %v", first, gw, slot, byAddr)
		}
		break
	}
}
