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
// http(s) URL; on live https only, and (unless allowPrivate) a host that
// resolves to public addresses only. "" clears the URL and is always valid.
// The dialer checks the addresses again at every delivery (see
// guardedControl), since DNS can change after this check.
func ValidateCallbackURL(ctx context.Context, raw string, env domain.Environment, allowPrivate bool, r Resolver) error {
	if raw == "" {
		return nil
	}
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || u.Hostname() == "" || (u.Scheme != "http" && u.Scheme != "https") || u.User != nil {
		return domain.Invalidf("url must be an absolute http(s) URL")
	}
	if len(raw) > 2048 {
		return domain.Invalidf("url must be at most 2048 characters")
	}
	if env != domain.Live {
		return nil
	}
	if u.Scheme != "https" {
		return domain.Invalidf("A live callback URL must use https")
	}
	if allowPrivate {
		return nil
	}
	if r == nil {
		r = net.DefaultResolver
	}
	addrs, err := r.LookupNetIP(ctx, "ip", u.Hostname())
	if err != nil || len(addrs) == 0 {
		return domain.Invalidf("url host cannot be resolved")
	}
	for _, a := range addrs {
		if NonPublic(a) {
			return domain.Invalidf("A live callback URL may not point to a private or loopback address")
		}
	}
	return nil
}

// NonPublic reports whether a is an address a live callback may not reach:
// loopback, private, link-local, unspecified, multicast, or the shared and
// benchmarking ranges.
func NonPublic(a netip.Addr) bool {
	a = a.Unmap()
	if a.IsLoopback() || a.IsPrivate() || a.IsLinkLocalUnicast() || a.IsLinkLocalMulticast() ||
		a.IsInterfaceLocalMulticast() || a.IsMulticast() || a.IsUnspecified() {
		return true
	}
	for _, p := range extraBlocked {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

var extraBlocked = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),     // "this network"
	netip.MustParsePrefix("100.64.0.0/10"), // carrier-grade NAT
	netip.MustParsePrefix("192.0.0.0/24"),  // IETF protocol assignments
	netip.MustParsePrefix("198.18.0.0/15"), // benchmarking
	netip.MustParsePrefix("240.0.0.0/4"),   // reserved
	netip.MustParsePrefix("64:ff9b::/96"),  // NAT64 can reach IPv4 private space
}

// ErrBlockedAddress is the dial error of a live delivery to a non-public
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
