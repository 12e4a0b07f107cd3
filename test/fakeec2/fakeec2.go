// Package fakeec2 is a local EC2 endpoint for tests and benchmarks: the
// query API (form-encoded requests, XML answers and errors) of the calls
// egressflow's AWS provider makes, over a model of subnets, instance types
// and network interfaces. It speaks to the real AWS SDK pointed at its URL;
// no real cloud is ever called.
//
// What it models of EC2, beyond the happy path:
//
//   - throttling: Throttle(n) fails the next n requests with
//     RequestLimitExceeded (HTTP 503), as EC2 does past its request rate;
//   - eventual consistency: an address assigned to an interface is listed
//     by DescribeNetworkInterfaces only SetListDelay later (EC2 documents
//     that Describe calls may lag a change); a released one stops being
//     listed at once;
//   - a full interface: an assignment past the instance type's addresses
//     per interface fails with PrivateIpAddressLimitExceeded (IPv4) or
//     Ipv6AddressLimitExceeded (IPv6);
//   - an address on another interface, the primary one included:
//     InvalidIPAddress.InUse; one outside the interface's subnet, or not
//     on the interface it is unassigned from: InvalidParameterValue;
//   - latency: SetLatency delays every answer.
//
// Assigning an address an interface already has succeeds and changes
// nothing.
package fakeec2

import (
	"context"
	"encoding/xml"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
)

// Server is the endpoint; its methods set up and inspect the model.
type Server struct {
	// URL is the endpoint, for the SDK's BaseEndpoint.
	URL string

	mu         sync.Mutex
	subnets    map[string]subnet
	types      map[string]instanceType
	interfaces map[string]*networkInterface
	calls      map[string]int
	throttle   int
	listDelay  time.Duration
	latency    time.Duration
	nextID     int
	// beforeRelease runs before an unassignment is answered.
	beforeRelease func(iface string, addr netip.Addr)
}

type subnet struct{ v4, v6 netip.Prefix }

type instanceType struct{ v4PerInterface, v6PerInterface int }

type networkInterface struct {
	id, instanceID, subnetID, instanceType string
	primary                                netip.Addr
	// secondary are the assigned addresses (both families), each with
	// the time from which it is listed.
	secondary map[netip.Addr]time.Time
}

// New starts a Server, stopped when the test ends.
func New(t testing.TB) *Server {
	s := &Server{subnets: map[string]subnet{}, types: map[string]instanceType{}, interfaces: map[string]*networkInterface{}, calls: map[string]int{}}
	srv := httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(srv.Close)
	s.URL = srv.URL
	return s
}

// AddSubnet adds a subnet with an IPv4 and, unless "", an IPv6 CIDR.
func (s *Server) AddSubnet(id, v4, v6 string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sn := subnet{v4: netip.MustParsePrefix(v4)}
	if v6 != "" {
		sn.v6 = netip.MustParsePrefix(v6)
	}
	s.subnets[id] = sn
}

// AddInstanceType adds an instance type with its addresses per interface
// (IPv4 counting the primary).
func (s *Server) AddInstanceType(name string, v4PerInterface, v6PerInterface int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.types[name] = instanceType{v4PerInterface, v6PerInterface}
}

// AddInstance adds an instance with its primary interface (device index
// 0) in subnetID, with primary as its primary address, and returns the
// interface's ID.
func (s *Server) AddInstance(instanceID, instanceType, subnetID string, primary netip.Addr) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nextID++
	id := fmt.Sprintf("eni-%08x", s.nextID)
	s.interfaces[id] = &networkInterface{id: id, instanceID: instanceID, subnetID: subnetID, instanceType: instanceType, primary: primary, secondary: map[netip.Addr]time.Time{}}
	return id
}

// TerminateInstance removes an instance and its interface, with every
// address on it, as EC2 does when the instance is terminated.
func (s *Server) TerminateInstance(instanceID string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, ni := range s.interfaces {
		if ni.instanceID == instanceID {
			delete(s.interfaces, id)
		}
	}
}

// AssignOutOfBand puts addr on interface id directly, as another tool
// would: it takes a slot of the interface.
func (s *Server) AssignOutOfBand(id string, addr netip.Addr) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.interfaces[id].secondary[addr] = time.Time{}
}

// Throttle fails the next n requests with RequestLimitExceeded.
func (s *Server) Throttle(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.throttle = n
}

// SetListDelay makes an assigned address listed only d after its
// assignment.
func (s *Server) SetListDelay(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.listDelay = d
}

// ListAll lists every address assigned so far: EC2 has caught up.
func (s *Server) ListAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, ni := range s.interfaces {
		for a := range ni.secondary {
			ni.secondary[a] = time.Time{}
		}
	}
}

// BeforeRelease has f called with each interface and address an
// unassignment names, before it is carried out and answered: a test's
// look at the world at the moment the cloud is asked to take an address
// away.
func (s *Server) BeforeRelease(f func(iface string, addr netip.Addr)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.beforeRelease = f
}

// SetLatency delays every answer by d.
func (s *Server) SetLatency(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.latency = d
}

// Calls is how many requests of action were answered (throttled ones
// included); "" counts every action.
func (s *Server) Calls(action string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if action != "" {
		return s.calls[action]
	}
	n := 0
	for _, c := range s.calls {
		n += c
	}
	return n
}

// Holders are the interfaces that have addr, listed or not yet: the
// truth the Describe calls lag behind.
func (s *Server) Holders(addr netip.Addr) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for id, ni := range s.interfaces {
		if _, ok := ni.secondary[addr]; ok || ni.primary == addr {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}

// Secondary are interface id's secondary addresses, listed or not.
func (s *Server) Secondary(id string) []netip.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []netip.Addr
	if ni := s.interfaces[id]; ni != nil {
		for a := range ni.secondary {
			out = append(out, a)
		}
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return out
}

// Config is an SDK configuration that reaches s, with static credentials
// and no retries of the SDK's own: every call reaches s, and its answer
// the caller.
func (s *Server) Config() awssdk.Config {
	return awssdk.Config{
		Region:           "us-east-1",
		BaseEndpoint:     &s.URL,
		RetryMaxAttempts: 1,
		Credentials: awssdk.CredentialsProviderFunc(func(context.Context) (awssdk.Credentials, error) {
			return awssdk.Credentials{AccessKeyID: "AKIDEXAMPLE", SecretAccessKey: "secret"}, nil
		}),
	}
}

// apiError is an EC2 error answer.
type apiError struct {
	status        int
	code, message string
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		writeError(w, apiError{http.StatusBadRequest, "MalformedQueryString", err.Error()})
		return
	}
	action := r.PostForm.Get("Action")
	s.mu.Lock()
	latency := s.latency
	s.calls[action]++
	throttled := s.throttle > 0
	if throttled {
		s.throttle--
	}
	s.mu.Unlock()
	if latency > 0 {
		time.Sleep(latency)
	}
	if throttled {
		writeError(w, apiError{http.StatusServiceUnavailable, "RequestLimitExceeded", "Request limit exceeded."})
		return
	}
	s.mu.Lock()
	hook := s.beforeRelease
	s.mu.Unlock()
	if hook != nil && strings.HasPrefix(action, "Unassign") {
		for _, v := range append(list(r.PostForm, "PrivateIpAddress"), list(r.PostForm, "Ipv6Addresses")...) {
			if a, err := netip.ParseAddr(v); err == nil {
				hook(r.PostForm.Get("NetworkInterfaceId"), a)
			}
		}
	}
	s.mu.Lock()
	body, aerr := s.handle(action, r.PostForm, time.Now())
	s.mu.Unlock()
	if aerr != nil {
		writeError(w, *aerr)
		return
	}
	w.Header().Set("Content-Type", "text/xml;charset=UTF-8")
	fmt.Fprintf(w, `<?xml version="1.0" encoding="UTF-8"?>`+"\n"+`<%sResponse xmlns="http://ec2.amazonaws.com/doc/2016-11-15/"><requestId>%s</requestId>%s</%sResponse>`,
		action, requestID, body, action)
}

const requestID = "00000000-0000-0000-0000-000000000000"

func writeError(w http.ResponseWriter, e apiError) {
	w.Header().Set("Content-Type", "text/xml;charset=UTF-8")
	w.WriteHeader(e.status)
	fmt.Fprintf(w, `<?xml version="1.0" encoding="UTF-8"?>`+"\n"+`<Response><Errors><Error><Code>%s</Code><Message>%s</Message></Error></Errors><RequestID>%s</RequestID></Response>`,
		escape(e.code), escape(e.message), requestID)
}

func escape(s string) string {
	var b strings.Builder
	xml.EscapeText(&b, []byte(s))
	return b.String()
}

// list reads a flattened list parameter: name.1, name.2, ...
func list(form map[string][]string, name string) []string {
	var out []string
	for i := 1; ; i++ {
		v, ok := form[name+"."+strconv.Itoa(i)]
		if !ok {
			return out
		}
		out = append(out, v[0])
	}
}

// filters reads Filter.N.Name and Filter.N.Value.M.
func filters(form map[string][]string) map[string][]string {
	out := map[string][]string{}
	for i := 1; ; i++ {
		name, ok := form["Filter."+strconv.Itoa(i)+".Name"]
		if !ok {
			return out
		}
		out[name[0]] = list(form, "Filter."+strconv.Itoa(i)+".Value")
	}
}

func badParameter(format string, args ...any) *apiError {
	return &apiError{http.StatusBadRequest, "InvalidParameterValue", fmt.Sprintf(format, args...)}
}

func (s *Server) handle(action string, form map[string][]string, now time.Time) (string, *apiError) {
	switch action {
	case "DescribeNetworkInterfaces":
		return s.describeNetworkInterfaces(form, now)
	case "DescribeInstanceTypes":
		return s.describeInstanceTypes(form)
	case "DescribeSubnets":
		return s.describeSubnets(form)
	case "AssignPrivateIpAddresses":
		return s.assign(form, "PrivateIpAddress", false, now)
	case "AssignIpv6Addresses":
		return s.assign(form, "Ipv6Addresses", true, now)
	case "UnassignPrivateIpAddresses":
		return s.unassign(form, "PrivateIpAddress", false)
	case "UnassignIpv6Addresses":
		return s.unassign(form, "Ipv6Addresses", true)
	}
	return "", &apiError{http.StatusBadRequest, "InvalidAction", "The action " + action + " is not valid for this web service."}
}

// listed says whether addr is listed on ni at now.
func (ni *networkInterface) listed(addr netip.Addr, now time.Time) bool {
	at, ok := ni.secondary[addr]
	return addr == ni.primary || (ok && !now.Before(at))
}

func (s *Server) describeNetworkInterfaces(form map[string][]string, now time.Time) (string, *apiError) {
	f := filters(form)
	ids := list(form, "NetworkInterfaceId")
	var out []*networkInterface
	for _, ni := range s.interfaces {
		match := (len(ids) == 0 || slices.Contains(ids, ni.id)) &&
			(f["attachment.instance-id"] == nil || slices.Contains(f["attachment.instance-id"], ni.instanceID)) &&
			(f["attachment.device-index"] == nil || slices.Contains(f["attachment.device-index"], "0"))
		for _, key := range []string{"addresses.private-ip-address", "ipv6-addresses.ipv6-address"} {
			if want := f[key]; want != nil {
				found := false
				for _, v := range want {
					a, err := netip.ParseAddr(v)
					found = found || (err == nil && ni.listed(a, now))
				}
				match = match && found
			}
		}
		if match {
			out = append(out, ni)
		}
	}
	slices.SortFunc(out, func(a, b *networkInterface) int { return strings.Compare(a.id, b.id) })
	var b strings.Builder
	b.WriteString("<networkInterfaceSet>")
	for _, ni := range out {
		fmt.Fprintf(&b, "<item><networkInterfaceId>%s</networkInterfaceId><subnetId>%s</subnetId><status>in-use</status>"+
			"<attachment><instanceId>%s</instanceId><deviceIndex>0</deviceIndex><status>attached</status></attachment>"+
			"<privateIpAddress>%s</privateIpAddress><privateIpAddressesSet>", ni.id, ni.subnetID, ni.instanceID, ni.primary)
		fmt.Fprintf(&b, "<item><privateIpAddress>%s</privateIpAddress><primary>true</primary></item>", ni.primary)
		var v6 []netip.Addr
		for _, a := range sortedAddrs(ni.secondary) {
			if !ni.listed(a, now) {
				continue
			}
			if a.Is6() {
				v6 = append(v6, a)
				continue
			}
			fmt.Fprintf(&b, "<item><privateIpAddress>%s</privateIpAddress><primary>false</primary></item>", a)
		}
		b.WriteString("</privateIpAddressesSet><ipv6AddressesSet>")
		for _, a := range v6 {
			fmt.Fprintf(&b, "<item><ipv6Address>%s</ipv6Address></item>", a)
		}
		b.WriteString("</ipv6AddressesSet></item>")
	}
	b.WriteString("</networkInterfaceSet>")
	return b.String(), nil
}

func sortedAddrs(m map[netip.Addr]time.Time) []netip.Addr {
	out := make([]netip.Addr, 0, len(m))
	for a := range m {
		out = append(out, a)
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return out
}

func (s *Server) describeInstanceTypes(form map[string][]string) (string, *apiError) {
	var b strings.Builder
	b.WriteString("<instanceTypeSet>")
	for _, name := range list(form, "InstanceType") {
		it, ok := s.types[name]
		if !ok {
			return "", &apiError{http.StatusBadRequest, "InvalidInstanceType", "The following supplied instance types do not exist: [" + name + "]"}
		}
		fmt.Fprintf(&b, "<item><instanceType>%s</instanceType><networkInfo><ipv4AddressesPerInterface>%d</ipv4AddressesPerInterface>"+
			"<ipv6AddressesPerInterface>%d</ipv6AddressesPerInterface><ipv6Supported>%v</ipv6Supported></networkInfo></item>",
			name, it.v4PerInterface, it.v6PerInterface, it.v6PerInterface > 0)
	}
	b.WriteString("</instanceTypeSet>")
	return b.String(), nil
}

func (s *Server) describeSubnets(form map[string][]string) (string, *apiError) {
	var b strings.Builder
	b.WriteString("<subnetSet>")
	for _, id := range list(form, "SubnetId") {
		sn, ok := s.subnets[id]
		if !ok {
			return "", &apiError{http.StatusBadRequest, "InvalidSubnetID.NotFound", "The subnet ID '" + id + "' does not exist"}
		}
		fmt.Fprintf(&b, "<item><subnetId>%s</subnetId><cidrBlock>%s</cidrBlock><ipv6CidrBlockAssociationSet>", id, sn.v4)
		if sn.v6.IsValid() {
			fmt.Fprintf(&b, "<item><ipv6CidrBlock>%s</ipv6CidrBlock><ipv6CidrBlockState><state>associated</state></ipv6CidrBlockState></item>", sn.v6)
		}
		b.WriteString("</ipv6CidrBlockAssociationSet></item>")
	}
	b.WriteString("</subnetSet>")
	return b.String(), nil
}

// addresses reads the addresses of an (un)assign call, each of the family
// it names.
func addresses(form map[string][]string, param string, v6 bool) ([]netip.Addr, *apiError) {
	var out []netip.Addr
	for _, v := range list(form, param) {
		a, err := netip.ParseAddr(v)
		if err != nil || a.Is6() != v6 {
			return nil, badParameter("Invalid IP address: %s", v)
		}
		out = append(out, a)
	}
	if len(out) == 0 {
		return nil, &apiError{http.StatusBadRequest, "MissingParameter", "The request must contain the parameter " + param}
	}
	return out, nil
}

func (s *Server) networkInterface(form map[string][]string) (*networkInterface, *apiError) {
	id := ""
	if v := form["NetworkInterfaceId"]; len(v) > 0 {
		id = v[0]
	}
	ni := s.interfaces[id]
	if ni == nil {
		return nil, &apiError{http.StatusBadRequest, "InvalidNetworkInterfaceID.NotFound", "The networkInterface ID '" + id + "' does not exist"}
	}
	return ni, nil
}

func (s *Server) assign(form map[string][]string, param string, v6 bool, now time.Time) (string, *apiError) {
	ni, aerr := s.networkInterface(form)
	if aerr != nil {
		return "", aerr
	}
	addrs, aerr := addresses(form, param, v6)
	if aerr != nil {
		return "", aerr
	}
	reassign := len(form["AllowReassignment"]) > 0 && form["AllowReassignment"][0] == "true"
	sn := s.subnets[ni.subnetID]
	held := 0
	if !v6 {
		held = 1 // the primary
	}
	for a := range ni.secondary {
		if a.Is6() == v6 {
			held++
		}
	}
	var add []netip.Addr
	for _, a := range addrs {
		if _, ok := ni.secondary[a]; ok {
			continue
		}
		p := sn.v4
		if v6 {
			p = sn.v6
		}
		if !p.IsValid() || !p.Contains(a) {
			return "", badParameter("Address %s does not fall within the subnet's address range", a)
		}
		for _, other := range s.interfaces {
			_, has := other.secondary[a]
			if other.primary == a || (has && !reassign) {
				return "", &apiError{http.StatusBadRequest, "InvalidIPAddress.InUse", fmt.Sprintf("Address %s is in use.", a)}
			}
		}
		add = append(add, a)
	}
	it := s.types[ni.instanceType]
	limit, code := it.v4PerInterface, "PrivateIpAddressLimitExceeded"
	if v6 {
		limit, code = it.v6PerInterface, "Ipv6AddressLimitExceeded"
	}
	if held+len(add) > limit {
		return "", &apiError{http.StatusBadRequest, code, "Number of private addresses will exceed limit."}
	}
	for _, a := range add {
		for _, other := range s.interfaces {
			delete(other.secondary, a) // AllowReassignment
		}
		ni.secondary[a] = now.Add(s.listDelay)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "<networkInterfaceId>%s</networkInterfaceId>", ni.id)
	if v6 {
		b.WriteString("<assignedIpv6Addresses>")
		for _, a := range addrs {
			fmt.Fprintf(&b, "<item>%s</item>", a)
		}
		b.WriteString("</assignedIpv6Addresses>")
	} else {
		b.WriteString("<assignedPrivateIpAddressesSet>")
		for _, a := range addrs {
			fmt.Fprintf(&b, "<item><privateIpAddress>%s</privateIpAddress></item>", a)
		}
		b.WriteString("</assignedPrivateIpAddressesSet>")
	}
	return b.String(), nil
}

func (s *Server) unassign(form map[string][]string, param string, v6 bool) (string, *apiError) {
	ni, aerr := s.networkInterface(form)
	if aerr != nil {
		return "", aerr
	}
	addrs, aerr := addresses(form, param, v6)
	if aerr != nil {
		return "", aerr
	}
	for _, a := range addrs {
		if _, ok := ni.secondary[a]; !ok {
			return "", badParameter("Some of the specified addresses are not assigned to interface %s", ni.id)
		}
	}
	for _, a := range addrs {
		delete(ni.secondary, a)
	}
	if v6 {
		var b strings.Builder
		fmt.Fprintf(&b, "<networkInterfaceId>%s</networkInterfaceId><unassignedIpv6Addresses>", ni.id)
		for _, a := range addrs {
			fmt.Fprintf(&b, "<item>%s</item>", a)
		}
		b.WriteString("</unassignedIpv6Addresses>")
		return b.String(), nil
	}
	return "<return>true</return>", nil
}
