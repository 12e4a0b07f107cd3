// Package aws is the cloud.Provider of AWS EC2, on the official SDK: an
// egress address is a secondary private address (IPv4) or an IPv6 address
// of the node's primary network interface (device index 0), assigned with
// AssignPrivateIpAddresses or AssignIpv6Addresses and released with their
// Unassign counterparts. A node's instance is its spec.providerID
// (aws:///<zone>/<instance-id>); its instance type, which bounds the
// addresses per interface, is its node.kubernetes.io/instance-type label.
//
// It is tested against test/fakeec2, a local endpoint that speaks the same
// query API, with its throttling, its lagging reads and its full
// interfaces; no test calls AWS.
package aws

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"time"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/smithy-go"
	corev1 "k8s.io/api/core/v1"

	"github.com/egressflow/egressflow/controller/cloud"
	"github.com/egressflow/egressflow/controller/reasons"
)

// Name is the provider's name for --cloud-provider.
const Name = "aws"

const (
	// DefaultListedTimeout is how long Assign waits for EC2 to list an
	// address it accepted before it returns CloudAssignPending (the
	// controller then retries with backoff). EC2's reads lag its writes by
	// seconds at most; the reference polls for a minute. Longer holds a
	// worker; shorter costs a retry's backoff on a slow day.
	DefaultListedTimeout = 10 * time.Second
	// DefaultPollInterval is how often Assign asks whether the address is
	// listed: each ask is a DescribeNetworkInterfaces call, counted
	// against the account's request rate; the reference asks every 2 s.
	DefaultPollInterval = 250 * time.Millisecond
	// DefaultRetryAttempts and DefaultMaxBackoff are the SDK's own retries
	// of a call that failed for a transient cause (throttling, a reset
	// connection) before the controller sees the error and retries the
	// whole sync with its backoff. The SDK's default backoff runs to 20 s,
	// which would hold a worker and its address that long; the
	// controller's own backoff, and the condition it writes meanwhile, say
	// more.
	DefaultRetryAttempts = 3
	DefaultMaxBackoff    = time.Second
)

// Options tune the provider.
type Options struct {
	// ListedTimeout and PollInterval: DefaultListedTimeout and
	// DefaultPollInterval when zero.
	ListedTimeout, PollInterval time.Duration
}

// Provider is the AWS EC2 provider.
type Provider struct {
	ec2  *ec2.Client
	opts Options
	// perInterface are the instance types' addresses per interface (IPv4,
	// IPv6), which never change: one DescribeInstanceTypes per type.
	mu           sync.Mutex
	perInterface map[string][2]int
}

// New is a Provider of the EC2 API that cfg reaches (its region,
// credentials, retries and, for tests, BaseEndpoint).
func New(cfg awssdk.Config, opts Options, optFns ...func(*ec2.Options)) *Provider {
	if opts.ListedTimeout == 0 {
		opts.ListedTimeout = DefaultListedTimeout
	}
	if opts.PollInterval == 0 {
		opts.PollInterval = DefaultPollInterval
	}
	return &Provider{ec2: ec2.NewFromConfig(cfg, optFns...), opts: opts, perInterface: map[string][2]int{}}
}

// NewFromEnvironment is a Provider with the SDK's usual sources of region
// and credentials: the environment (AWS_REGION, a web identity token for
// a ServiceAccount bound to an IAM role), the shared files, the instance's
// metadata service (its region and its instance profile).
func NewFromEnvironment(ctx context.Context, opts Options) (*Provider, error) {
	cfg, err := config.LoadDefaultConfig(ctx, config.WithEC2IMDSRegion(), config.WithRetryer(func() awssdk.Retryer {
		return retry.NewStandard(func(o *retry.StandardOptions) {
			o.MaxAttempts, o.MaxBackoff = DefaultRetryAttempts, DefaultMaxBackoff
		})
	}))
	if err != nil {
		return nil, fmt.Errorf("AWS configuration: %w", err)
	}
	if cfg.Region == "" {
		return nil, errors.New("AWS configuration: no region (set AWS_REGION, or run on EC2)")
	}
	return New(cfg, opts), nil
}

func (*Provider) Name() string { return Name }
func (*Provider) Cloud() bool  { return true }

// instanceID reads the instance of a providerID aws:///<zone>/<id> (or
// aws://<zone>/<id>).
func instanceID(providerID string) (string, error) {
	rest, ok := strings.CutPrefix(providerID, "aws://")
	i := strings.LastIndex(rest, "/")
	if !ok || i < 0 || !strings.HasPrefix(rest[i+1:], "i-") {
		return "", fmt.Errorf("spec.providerID %q is not an AWS instance (aws:///<zone>/i-...)", providerID)
	}
	return rest[i+1:], nil
}

// NodeInterface finds the node's primary interface, its subnet and its
// instance type's limits: two calls, and one more for an instance type
// not seen before.
func (p *Provider) NodeInterface(ctx context.Context, node *corev1.Node) (cloud.Interface, error) {
	id, err := instanceID(node.Spec.ProviderID)
	if err != nil {
		return cloud.Interface{}, &cloud.Error{Reason: reasons.CloudNodeUnknown, Err: err}
	}
	typ := node.Labels[corev1.LabelInstanceTypeStable]
	if typ == "" {
		return cloud.Interface{}, &cloud.Error{Reason: reasons.CloudNodeUnknown, Err: fmt.Errorf("node %s has no %s label", node.Name, corev1.LabelInstanceTypeStable)}
	}
	out, err := p.ec2.DescribeNetworkInterfaces(ctx, &ec2.DescribeNetworkInterfacesInput{Filters: []ec2types.Filter{
		{Name: awssdk.String("attachment.instance-id"), Values: []string{id}},
		{Name: awssdk.String("attachment.device-index"), Values: []string{"0"}},
	}})
	if err != nil {
		return cloud.Interface{}, wrap(err)
	}
	if len(out.NetworkInterfaces) != 1 {
		return cloud.Interface{}, &cloud.Error{Reason: reasons.CloudNodeUnknown, Err: fmt.Errorf("instance %s has %d primary interfaces", id, len(out.NetworkInterfaces))}
	}
	ni := out.NetworkInterfaces[0]
	iface := cloud.Interface{ID: awssdk.ToString(ni.NetworkInterfaceId), Addresses: interfaceAddresses(ni)}

	perInterface, err := p.addressesPerInterface(ctx, typ)
	if err != nil {
		return cloud.Interface{}, err
	}
	iface.PerInterfaceIPv4, iface.PerInterfaceIPv6 = perInterface[0], perInterface[1]

	subnets, err := p.ec2.DescribeSubnets(ctx, &ec2.DescribeSubnetsInput{SubnetIds: []string{awssdk.ToString(ni.SubnetId)}})
	if err != nil {
		return cloud.Interface{}, wrap(err)
	}
	for _, sn := range subnets.Subnets {
		if p, err := netip.ParsePrefix(awssdk.ToString(sn.CidrBlock)); err == nil {
			iface.Subnets = append(iface.Subnets, p)
		}
		for _, a := range sn.Ipv6CidrBlockAssociationSet {
			if a.Ipv6CidrBlockState == nil || a.Ipv6CidrBlockState.State != ec2types.SubnetCidrBlockStateCodeAssociated {
				continue
			}
			if p, err := netip.ParsePrefix(awssdk.ToString(a.Ipv6CidrBlock)); err == nil {
				iface.Subnets = append(iface.Subnets, p)
				break
			}
		}
	}
	return iface, nil
}

// addressesPerInterface are typ's IPv4 and IPv6 addresses per interface.
func (p *Provider) addressesPerInterface(ctx context.Context, typ string) ([2]int, error) {
	p.mu.Lock()
	known, ok := p.perInterface[typ]
	p.mu.Unlock()
	if ok {
		return known, nil
	}
	types, err := p.ec2.DescribeInstanceTypes(ctx, &ec2.DescribeInstanceTypesInput{InstanceTypes: []ec2types.InstanceType{ec2types.InstanceType(typ)}})
	if err != nil {
		return [2]int{}, wrap(err)
	}
	if len(types.InstanceTypes) != 1 || types.InstanceTypes[0].NetworkInfo == nil {
		return [2]int{}, &cloud.Error{Reason: reasons.CloudNodeUnknown, Err: fmt.Errorf("EC2 does not describe instance type %s", typ)}
	}
	info := types.InstanceTypes[0].NetworkInfo
	known = [2]int{int(awssdk.ToInt32(info.Ipv4AddressesPerInterface)), int(awssdk.ToInt32(info.Ipv6AddressesPerInterface))}
	p.mu.Lock()
	p.perInterface[typ] = known
	p.mu.Unlock()
	return known, nil
}

func interfaceAddresses(ni ec2types.NetworkInterface) []netip.Addr {
	var out []netip.Addr
	for _, a := range ni.PrivateIpAddresses {
		if addr, err := netip.ParseAddr(awssdk.ToString(a.PrivateIpAddress)); err == nil {
			out = append(out, addr)
		}
	}
	for _, a := range ni.Ipv6Addresses {
		if addr, err := netip.ParseAddr(awssdk.ToString(a.Ipv6Address)); err == nil {
			out = append(out, addr)
		}
	}
	return out
}

// Holder asks EC2 which interface lists addr: one call.
func (p *Provider) Holder(ctx context.Context, addr netip.Addr, _ string) (string, error) {
	filter := "addresses.private-ip-address"
	if addr.Is6() {
		filter = "ipv6-addresses.ipv6-address"
	}
	out, err := p.ec2.DescribeNetworkInterfaces(ctx, &ec2.DescribeNetworkInterfacesInput{Filters: []ec2types.Filter{
		{Name: awssdk.String(filter), Values: []string{addr.String()}},
	}})
	if err != nil {
		return "", wrap(err)
	}
	for _, ni := range out.NetworkInterfaces {
		if addr.Is4() && awssdk.ToString(ni.PrivateIpAddress) == addr.String() {
			return "", &cloud.Error{Reason: reasons.CloudAddressInUse, Err: fmt.Errorf("%s is the primary address of %s", addr, awssdk.ToString(ni.NetworkInterfaceId))}
		}
	}
	switch len(out.NetworkInterfaces) {
	case 0:
		return "", nil
	case 1:
		return awssdk.ToString(out.NetworkInterfaces[0].NetworkInterfaceId), nil
	}
	return "", &cloud.Error{Reason: reasons.CloudRequestFailed, Err: fmt.Errorf("EC2 lists %s on %d interfaces", addr, len(out.NetworkInterfaces))}
}

// Assign gives addr to iface, and waits until EC2 lists it there.
func (p *Provider) Assign(ctx context.Context, iface string, addr netip.Addr) error {
	var err error
	if addr.Is4() {
		_, err = p.ec2.AssignPrivateIpAddresses(ctx, &ec2.AssignPrivateIpAddressesInput{NetworkInterfaceId: &iface, PrivateIpAddresses: []string{addr.String()}})
	} else {
		_, err = p.ec2.AssignIpv6Addresses(ctx, &ec2.AssignIpv6AddressesInput{NetworkInterfaceId: &iface, Ipv6Addresses: []string{addr.String()}})
	}
	// In use: perhaps by iface itself, from a call whose answer was
	// lost; the listing below tells.
	if err != nil && apiCode(err) != "InvalidIPAddress.InUse" {
		return wrap(err)
	}
	deadline := time.Now().Add(p.opts.ListedTimeout)
	for {
		holder, herr := p.Holder(ctx, addr, "")
		switch {
		case herr != nil:
			return herr
		case holder == iface:
			return nil
		case holder != "":
			return &cloud.Error{Reason: reasons.CloudAddressInUse, Err: fmt.Errorf("%s is on %s", addr, holder)}
		case time.Now().After(deadline) && err != nil:
			return &cloud.Error{Reason: reasons.CloudAddressInUse, Err: fmt.Errorf("EC2 says %s is in use, and lists it nowhere after %s", addr, p.opts.ListedTimeout)}
		case time.Now().After(deadline):
			return &cloud.Error{Reason: reasons.CloudAssignPending, Err: fmt.Errorf("EC2 accepted %s on %s and does not list it after %s", addr, iface, p.opts.ListedTimeout)}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(p.opts.PollInterval):
		}
	}
}

// Release takes addr from iface; one that does not have it (EC2 says
// InvalidParameterValue) or is gone counts as released.
func (p *Provider) Release(ctx context.Context, iface string, addr netip.Addr) error {
	var err error
	if addr.Is4() {
		_, err = p.ec2.UnassignPrivateIpAddresses(ctx, &ec2.UnassignPrivateIpAddressesInput{NetworkInterfaceId: &iface, PrivateIpAddresses: []string{addr.String()}})
	} else {
		_, err = p.ec2.UnassignIpv6Addresses(ctx, &ec2.UnassignIpv6AddressesInput{NetworkInterfaceId: &iface, Ipv6Addresses: []string{addr.String()}})
	}
	switch apiCode(err) {
	case "", "InvalidNetworkInterfaceID.NotFound":
		return nil
	case "InvalidParameterValue":
		// Not on iface, or some other fault: ask.
		if holder, herr := p.Holder(ctx, addr, ""); herr == nil && holder != iface {
			return nil
		}
	}
	return wrap(err)
}

func apiCode(err error) string {
	if err == nil {
		return ""
	}
	if e, ok := errors.AsType[smithy.APIError](err); ok {
		return e.ErrorCode()
	}
	return ""
}

// wrap gives an SDK error its reason, and a message without the parts
// that change from call to call (the request ID), so that a status that
// reports it changes only when the failure does.
func wrap(err error) error {
	reason := reasons.CloudRequestFailed
	code := apiCode(err)
	switch code {
	case "RequestLimitExceeded", "Throttling", "ThrottlingException":
		reason = reasons.CloudThrottled
	case "PrivateIpAddressLimitExceeded", "Ipv6AddressLimitExceeded", "AddressLimitExceeded":
		reason = reasons.CloudInterfaceFull
	case "InvalidIPAddress.InUse":
		reason = reasons.CloudAddressInUse
	case "InvalidInstanceID.NotFound", "InvalidNetworkInterfaceID.NotFound", "InvalidInstanceType":
		reason = reasons.CloudNodeUnknown
	}
	msg := err.Error()
	if e, ok := errors.AsType[*smithy.OperationError](err); ok && code != "" {
		msg = fmt.Sprintf("EC2 %s: %s", e.Operation(), code)
		if api, ok := errors.AsType[smithy.APIError](err); ok && api.ErrorMessage() != "" {
			msg += ": " + api.ErrorMessage()
		}
	}
	return &cloud.Error{Reason: reason, Err: errors.New(msg)}
}
