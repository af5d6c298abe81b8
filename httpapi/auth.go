package httpapi

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net"
	"net/http"
	"regexp"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/customer"
	"github.com/escrowd/escrowd/domain/merchant"
)

// Principal is the authenticated caller: one API key of one merchant.
type Principal struct {
	KeyID       string
	MerchantID  string
	Environment domain.Environment
	Role        merchant.Role
	Business    bool
	Country     string
	Allowlist   []string
	// ExpiresAt is when the key stops being accepted (zero: never).
	ExpiresAt time.Time
}

// CustomerRef is what auth needs to know about the customer named by the
// customer-id header.
type CustomerRef struct {
	ID          string
	MerchantID  string
	Environment domain.Environment
	Blocked     bool
	Permissions customer.Permissions
}

// Directory resolves keys and customers (backed by read models).
type Directory interface {
	// Resolve returns the principal of an active (unrevoked) key and, when
	// customerID is not "", that customer, in one round trip.
	Resolve(ctx context.Context, digest, customerID string) (p Principal, found bool, c CustomerRef, customerFound bool, err error)
}

// CIDRule says what a route does with the customer-id header.
type CIDRule int

const (
	CIDIgnored CIDRule = iota
	CIDRequired
	CIDOptional
	CIDForbidden
)

// Permission a customer must hold to act on a route.
type Permission string

const (
	NoPermission Permission = ""
	CanBuy       Permission = "canBuy"
	CanSell      Permission = "canSell"
	CanWithdraw  Permission = "canWithdraw"
)

// Policy is a route's access rule.
type Policy struct {
	CID        CIDRule
	SuperAdmin bool
	Permission Permission
}

const (
	ctxPrincipal = "principal"
	ctxCustomer  = "customer"
)

// PrincipalFrom returns the authenticated caller of c.
func PrincipalFrom(c echo.Context) (Principal, bool) {
	p, ok := c.Get(ctxPrincipal).(Principal)
	return p, ok
}

// CustomerFrom returns the customer the request acts for, if any.
func CustomerFrom(c echo.Context) (CustomerRef, bool) {
	r, ok := c.Get(ctxCustomer).(CustomerRef)
	return r, ok
}

var keyFormat = regexp.MustCompile(`^sk_(test|live)_[0-9A-Za-z]{32,}$`)

// KeyDigest is the stored form of a key.
func KeyDigest(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:])
}

func deny(code domain.Code, msg string) error { return &domain.Error{Code: code, Message: msg} }

// environmentOf maps the request host to an environment.
func (s *Server) environmentOf(r *http.Request) domain.Environment {
	host := r.Host
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	if env, ok := s.cfg.Hosts[strings.ToLower(host)]; ok {
		return env
	}
	return s.cfg.DefaultEnvironment
}

// authenticate runs the authentication checks in their fixed order.
func (s *Server) authenticate(pol Policy) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			r := c.Request()
			ctx := r.Context()
			authz := r.Header.Get(echo.HeaderAuthorization)
			if strings.TrimSpace(authz) == "" {
				return deny(domain.Unauthenticated, "No token provided")
			}
			key, ok := strings.CutPrefix(authz, "Bearer ")
			key = strings.TrimSpace(key)
			if !ok || !keyFormat.MatchString(key) {
				return deny(domain.Forbidden, "Unauthorized Access")
			}
			cid := strings.TrimSpace(r.Header.Get("customer-id"))
			if pol.CID == CIDIgnored {
				cid = ""
			}
			lookup := cid
			if pol.CID == CIDForbidden {
				lookup = "" // refused below; no need to read the customer
			}
			p, found, ref, refFound, err := s.dir.Resolve(ctx, KeyDigest(key), lookup)
			if err != nil {
				return err
			}
			if !found || p.Environment != s.environmentOf(r) || !strings.HasPrefix(key, "sk_"+string(p.Environment)+"_") {
				return deny(domain.Forbidden, "Unauthorized Access")
			}
			now := s.now()
			if !p.ExpiresAt.IsZero() && !now.Before(p.ExpiresAt) {
				return deny(domain.Unauthenticated, "Access denied")
			}
			if p.Environment == domain.Live && len(p.Allowlist) > 0 && !ipAllowed(net.ParseIP(c.RealIP()), p.Allowlist) {
				return deny(domain.Forbidden, "Unauthorized IP address")
			}
			s.keyUses.Used(p.KeyID, now)
			if s.limiter != nil && s.cfg.RateLimitPerMinute > 0 {
				d, err := s.limiter.Allow(ctx, p.KeyID, time.Now())
				if err != nil {
					return err
				}
				WriteRateLimitHeaders(c.Response().Header(), d, s.cfg.RateLimitPerMinute)
				if !d.Allowed {
					return TooManyRequests(c, d, s.cfg.RateLimitPerMinute)
				}
			}
			if pol.SuperAdmin && p.Role != merchant.SuperAdmin {
				return deny(domain.Unauthenticated, "Access denied")
			}
			c.Set(ctxPrincipal, p)
			switch pol.CID {
			case CIDRequired:
				if cid == "" {
					return domain.Invalidf("customer-id header is required")
				}
			case CIDForbidden:
				if cid != "" {
					return domain.Invalidf("customer-id is not allowed in request header")
				}
			}
			if cid != "" {
				if !refFound {
					return deny(domain.NotFound, "Customer not found")
				}
				if ref.MerchantID != p.MerchantID || ref.Environment != p.Environment {
					return deny(domain.Forbidden, "Customer does not belong to the merchant")
				}
				if ref.Blocked {
					return deny(domain.Unauthenticated, "Your account is disabled. Please contact support")
				}
				if !hasPermission(ref.Permissions, pol.Permission) {
					return deny(domain.Unauthenticated, "Access denied")
				}
				c.Set(ctxCustomer, ref)
			}
			return next(c)
		}
	}
}

func hasPermission(p customer.Permissions, need Permission) bool {
	switch need {
	case CanBuy:
		return p.CanBuy
	case CanSell:
		return p.CanSell
	case CanWithdraw:
		return p.CanWithdraw
	}
	return true
}

// ipAllowed matches ip against allowlist entries (addresses or CIDRs).
func ipAllowed(ip net.IP, allowlist []string) bool {
	if ip == nil {
		return false
	}
	for _, entry := range allowlist {
		if strings.Contains(entry, "/") {
			if _, n, err := net.ParseCIDR(entry); err == nil && n.Contains(ip) {
				return true
			}
			continue
		}
		if a := net.ParseIP(entry); a != nil && a.Equal(ip) {
			return true
		}
	}
	return false
}
