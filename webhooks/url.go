package webhooks

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"syscall"

	"github.com/escrowd/escrowd/domain"
)

// Resolver looks host names up (net.DefaultResolver; tests inject one).
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// ValidateCallbackURL checks a callback URL before it is stored: an absolute
// http(s) URL, https on live, and (unless allowPrivate) a host that resolves
// to public addresses only, in both environments (a test
// key is no less able to probe the host's network). "" clears the URL and is
// always valid. The dialer checks the addresses again at every delivery (see
// guardedControl), since DNS can change after this check.
func ValidateCallbackURL(ctx context.Context, raw string, env domain.Environment, allowPrivate bool, r Resolver) error {
	if raw == "" {
		return nil
	}
	if len(raw) > domain.MaxURL {
		return ErrRefusedURL
	}
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || u.Hostname() == "" || (u.Scheme != "http" && u.Scheme != "https") || u.User != nil {
		return ErrRefusedURL
	}
	if env == domain.Live && u.Scheme != "https" {
		return ErrRefusedURL
	}
	if allowPrivate {
		return nil
	}
	var addrs []netip.Addr
	if a, err := netip.ParseAddr(u.Hostname()); err == nil {
		addrs = []netip.Addr{a} // a literal: nothing to resolve
	} else {
		if r == nil {
			r = net.DefaultResolver
		}
		addrs, err = r.LookupNetIP(ctx, "ip", u.Hostname())
		if err != nil || len(addrs) == 0 {
			return ErrRefusedURL
		}
	}
	for _, a := range addrs {
		if NonPublic(a) {
			return ErrRefusedURL
		}
	}
	return nil
}

// ErrRefusedURL is every refusal of a callback URL, whatever the reason:
// answers that told an unresolvable host from a private one let a key map
// the service's internal DNS through this check.
var ErrRefusedURL = domain.Invalidf("url must be a public http(s) address")

// NonPublic reports whether a callback may not reach a: any address that is
// not a globally reachable unicast one (private, loopback, link-local,
// CGNAT, multicast, unspecified, reserved, documentation, benchmarking), and
// any IPv6 form that carries such an IPv4 address to its owner: mapped,
// compatible (::127.0.0.1), translated, NAT64, 6to4 (2002::/16) and Teredo.
func NonPublic(a netip.Addr) bool {
	a = a.WithZone("").Unmap()
	if a.Is4() {
		return nonPublic4(a)
	}
	if !a.Is6() || a.IsLoopback() || a.IsPrivate() || a.IsLinkLocalUnicast() || a.IsMulticast() || a.IsUnspecified() {
		return true
	}
	for _, p := range blocked6 {
		if p.Contains(a) {
			return true
		}
	}
	b := a.As16()
	switch {
	case nat64.Contains(a):
		return nonPublic4(netip.AddrFrom4([4]byte(b[12:16])))
	case sixToFour.Contains(a):
		return nonPublic4(netip.AddrFrom4([4]byte(b[2:6])))
	case teredo.Contains(a):
		// The Teredo server's address, then the client's (stored inverted).
		client := [4]byte{^b[12], ^b[13], ^b[14], ^b[15]}
		return nonPublic4(netip.AddrFrom4([4]byte(b[4:8]))) || nonPublic4(netip.AddrFrom4(client))
	}
	return false
}

func nonPublic4(a netip.Addr) bool {
	for _, p := range blocked4 {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// blocked4 are the IPv4 special-purpose ranges (IANA registry) that are not
// globally reachable, plus multicast and the reserved space.
var blocked4 = prefixes(
	"0.0.0.0/8",       // "this network"
	"10.0.0.0/8",      // private
	"100.64.0.0/10",   // carrier-grade NAT
	"127.0.0.0/8",     // loopback
	"169.254.0.0/16",  // link-local, cloud metadata
	"172.16.0.0/12",   // private
	"192.0.0.0/24",    // IETF protocol assignments
	"192.0.2.0/24",    // documentation
	"192.88.99.0/24",  // 6to4 relay anycast (deprecated)
	"192.168.0.0/16",  // private
	"198.18.0.0/15",   // benchmarking
	"198.51.100.0/24", // documentation
	"203.0.113.0/24",  // documentation
	"224.0.0.0/4",     // multicast
	"240.0.0.0/4",     // reserved, broadcast
)

// blocked6 are IPv6 ranges refused whatever they carry.
var blocked6 = prefixes(
	"::/96",           // IPv4-compatible (deprecated), :: and ::1 included
	"::ffff:0:0:0/96", // IPv4-translated
	"64:ff9b:1::/48",  // local-use NAT64
	"100::/64",        // discard-only
	"2001:2::/48",     // benchmarking
	"2001:10::/28",    // ORCHID
	"2001:20::/28",    // ORCHIDv2
	"2001:db8::/32",   // documentation
	"3fff::/20",       // documentation
	"5f00::/16",       // segment routing SIDs
	"fec0::/10",       // site-local (deprecated)
)

// IPv6 ranges that embed an IPv4 address: refused when it is non-public.
var (
	nat64     = netip.MustParsePrefix("64:ff9b::/96")
	sixToFour = netip.MustParsePrefix("2002::/16")
	teredo    = netip.MustParsePrefix("2001::/32")
)

func prefixes(s ...string) []netip.Prefix {
	out := make([]netip.Prefix, len(s))
	for i, p := range s {
		out[i] = netip.MustParsePrefix(p)
	}
	return out
}

// ErrBlockedAddress is the dial error of a delivery to a non-public
// address.
var ErrBlockedAddress = errors.New("callback address is private or loopback")

// guardedControl is a net.Dialer Control hook refusing non-public addresses.
// It runs on the address actually dialled, after DNS resolution, so a host
// that re-resolves to an internal address (DNS rebinding) is still refused.
func guardedControl(network, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("%w: %s", ErrBlockedAddress, address)
	}
	if NonPublic(ap.Addr()) {
		return fmt.Errorf("%w: %s", ErrBlockedAddress, ap.Addr())
	}
	return nil
}
