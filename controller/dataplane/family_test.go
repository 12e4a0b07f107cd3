package dataplane

import (
	"fmt"
	"testing"
)

// existingKinds are the kinds of layouts 1–3, which keep their values.
var existingKinds = []FlowKind{
	KindRedirect, KindExempt, KindSNAT, KindSteer, KindDrop, KindReplyCT,
	KindDeliver, KindOrigin, KindMarker, KindPodGuard, KindAdmit,
}

// TestFamilyReservations checks that what the family reserves stays clear
// of what exists: the existing kinds are EgressService's, the reserved
// tables are new and come after TableOrigin's, and the precedence of the
// source and next-hop decisions is that of docs/dataplane.md.
func TestFamilyReservations(t *testing.T) {
	seen := map[FlowKind]bool{}
	for _, k := range existingKinds {
		if k == 0 || seen[k] {
			t.Errorf("kind %d is zero or used twice", k)
		}
		seen[k] = true
		if k.API() != APIEgressService {
			t.Errorf("existing kind %d belongs to %v, not EgressService", k, k.API())
		}
	}
	for a := API(1); a < apiCount; a++ {
		for role := uint8(0); role < 16; role++ {
			if k := a.Kind(role); seen[k] {
				t.Errorf("%v's kind %d (role %d) is already taken", a, k, role)
			}
		}
	}

	existingTables := []uint8{TableClassify, TableOrigin, TableEgress, TableReply, TableMarker}
	newer := []uint8{TableFirewall, TableQoS, TableNeighbour, TableUplink, TableEgressIPSpread, TableExternalRoute}
	for _, reserved := range newer {
		for _, existing := range existingTables {
			if reserved <= existing {
				t.Errorf("reserved table %d does not come after table %d", reserved, existing)
			}
		}
	}
	tables := map[uint8]bool{}
	for _, table := range append(existingTables, newer...) {
		if tables[table] {
			t.Errorf("table %d has two roles", table)
		}
		tables[table] = true
	}
	if !(TableOrigin < TableFirewall && TableFirewall < TableQoS) {
		t.Errorf("stages out of order: TableOrigin %d, TableFirewall %d, TableQoS %d", TableOrigin, TableFirewall, TableQoS)
	}

	// In TableEgress: EgressService, EgressIP, external route, late
	// admission, then the fail-closed drop.
	order := []uint16{priorityService, priorityEgressIP, priorityExternalRoute, priorityAdmittedLate, priorityFallback}
	for i := 1; i < len(order); i++ {
		if order[i-1] <= order[i] {
			t.Errorf("TableEgress priorities out of precedence order: %v", order)
		}
	}
	if priorityExempt <= priorityService {
		t.Errorf("the exemptions (%d) must come before every decision (%d)", priorityExempt, priorityService)
	}
}

// TestDecodeCookie checks that a cookie made for any API's kind and object
// decodes to that kind, API, object hash and layout, and that the API mask
// selects exactly one API: every one of the 16 the layout has room for,
// reserved or not.
func TestDecodeCookie(t *testing.T) {
	// A cookie as an operator sees it (TestFlowsText): an EgressService
	// SNAT flow of shop/web, layout 3.
	got, ok := DecodeCookie(0xef1003eb78a54403)
	if want := (CookieFields{Kind: KindSNAT, Hash: 0xeb78a544, Layout: 3}); !ok || got != want {
		t.Errorf("DecodeCookie(0xef1003eb78a54403) = %+v, %v; want %+v", got, ok, want)
	}
	if got.Kind.API() != APIEgressService {
		t.Errorf("an SNAT flow belongs to %v", got.Kind.API())
	}
	if _, ok := DecodeCookie(0xef11000000000003); ok {
		t.Error("a cookie without egressflow's prefix decoded")
	}

	const apis = 16
	for a := APIEgressService; a < apis; a++ {
		for _, role := range []uint8{1, 15} {
			k := a.Kind(role)
			key := ObjectKey(a, "shop", "default")
			c := Cookie(k, key)
			got, ok := DecodeCookie(c)
			want := CookieFields{Kind: k, Hash: ServiceHash(key), Layout: uint8(CookieLayout)}
			if !ok || got != want || got.Kind.API() != a {
				t.Errorf("%v role %d: DecodeCookie(%#x) = %+v, %v; want %+v of %v", a, role, c, got, ok, want, a)
			}
			for b := APIEgressService; b < apis; b++ {
				if matches := c&APICookieMask == b.Cookie(); matches != (a == b) {
					t.Errorf("cookie %#x of %v under the mask of %v: %v", c, a, b, matches)
				}
			}
		}
	}
}

// TestObjectKey checks that an EgressService keeps the key of layouts 1–3
// and that objects of the same namespace and name in different APIs get
// different keys, hence different groups.
func TestObjectKey(t *testing.T) {
	if got := ObjectKey(APIEgressService, "shop", "web"); got != "shop/web" {
		t.Errorf("EgressService key %q, want shop/web", got)
	}
	if got := ObjectKey(APIEgressIP, "", "prod"); got != "EgressIP/prod" {
		t.Errorf("cluster-scoped EgressIP key %q, want EgressIP/prod", got)
	}
	keys := map[string]API{}
	for a := APIEgressService; a < apiCount; a++ {
		k := ObjectKey(a, "shop", "default")
		if other, ok := keys[k]; ok {
			t.Errorf("%v and %v share key %q", a, other, k)
		}
		keys[k] = a
	}
	if got := fmt.Sprint(apiCount); got != "API(7)" {
		t.Errorf("an unnamed API prints %q", got)
	}
}
