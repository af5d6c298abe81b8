// Package whitelist is a customer's list of crypto addresses that withdrawals
// may pay out to: one aggregate (one stream) per customer, so the limit and
// the duplicate rule are decided against the whole list at once.
package whitelist

import (
	"regexp"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/escrowd/escrowd/domain"
)

const (
	// MaxAddresses is how many addresses one customer may whitelist.
	MaxAddresses = 10
	// MaxLabel is the longest label, in characters.
	MaxLabel = 50
	// NetworkBSC is the one network accepted.
	NetworkBSC = "BSC"
)

// Address is one whitelisted address.
type Address struct {
	ID            string    `json:"id"`
	WalletAddress string    `json:"walletAddress"` // as given; compared case-insensitively
	Network       string    `json:"network"`
	Label         string    `json:"label"`
	DateAdded     time.Time `json:"dateAdded"`
	LastUpdated   time.Time `json:"lastUpdated"`
}

// State is a customer's whitelist, oldest first.
type State struct {
	CustomerID string
	Addresses  []Address
}

// Has reports whether address is whitelisted (case-insensitively: hex
// addresses differ only in their checksum casing).
func (s State) Has(address string) bool {
	_, ok := s.byAddress(address)
	return ok
}

// Find returns the address with id.
func (s State) Find(id string) (Address, bool) {
	i := slices.IndexFunc(s.Addresses, func(a Address) bool { return a.ID == id })
	if i < 0 {
		return Address{}, false
	}
	return s.Addresses[i], true
}

func (s State) byAddress(address string) (Address, bool) {
	address = strings.TrimSpace(address)
	i := slices.IndexFunc(s.Addresses, func(a Address) bool { return strings.EqualFold(a.WalletAddress, address) })
	if i < 0 {
		return Address{}, false
	}
	return s.Addresses[i], true
}

// Events. AddressWhitelisted carries the tenant so read models need no join.
type (
	AddressWhitelisted struct {
		CustomerID    string             `json:"customerId"`
		MerchantID    string             `json:"merchantId"`
		Environment   domain.Environment `json:"environment"`
		AddressID     string             `json:"addressId"`
		WalletAddress string             `json:"walletAddress"`
		Network       string             `json:"network"`
		Label         string             `json:"label"`
		AddedAt       time.Time          `json:"addedAt"`
	}
	AddressRemoved struct {
		AddressID     string    `json:"addressId"`
		WalletAddress string    `json:"walletAddress"`
		RemovedAt     time.Time `json:"removedAt"`
	}
)

func (AddressWhitelisted) EventType() string { return "whitelist.address_whitelisted" }
func (AddressRemoved) EventType() string     { return "whitelist.address_removed" }

// Registry decodes whitelist events.
var Registry = domain.NewRegistry(
	func() domain.Event { return &AddressWhitelisted{} },
	func() domain.Event { return &AddressRemoved{} },
)

// Apply folds one event. The address slice is never changed in place (states
// are shared through the command engine's cache).
func Apply(s State, ev domain.Event) State {
	switch e := ev.(type) {
	case AddressWhitelisted:
		s.CustomerID = e.CustomerID
		s.Addresses = append(slices.Clip(s.Addresses), Address{ID: e.AddressID, WalletAddress: e.WalletAddress,
			Network: e.Network, Label: e.Label, DateAdded: e.AddedAt, LastUpdated: e.AddedAt})
	case AddressRemoved:
		s.Addresses = slices.DeleteFunc(slices.Clone(s.Addresses), func(a Address) bool { return a.ID == e.AddressID })
	}
	return s
}

var walletFormat = regexp.MustCompile(`^0x[0-9a-fA-F]{40}$`)

// ValidAddress reports whether s is a BSC (EVM) address: 0x and 40 hex digits.
func ValidAddress(s string) bool { return walletFormat.MatchString(s) }

// NewAddress is the input of Add.
type NewAddress struct {
	WalletAddress, Network, Label string
}

// Add decides whitelisting an address for customer customerID of merchantID
// in env; id is the new address's id.
func Add(s State, id, customerID, merchantID string, env domain.Environment, in NewAddress, now time.Time) (AddressWhitelisted, error) {
	addr := strings.TrimSpace(in.WalletAddress)
	if !ValidAddress(addr) {
		return AddressWhitelisted{}, domain.Invalidf("walletAddress must be 0x followed by 40 hexadecimal characters")
	}
	network := strings.ToUpper(strings.TrimSpace(in.Network))
	if network != NetworkBSC {
		return AddressWhitelisted{}, domain.Invalidf("network must be BSC")
	}
	label := strings.TrimSpace(in.Label)
	if utf8.RuneCountInString(label) > MaxLabel {
		return AddressWhitelisted{}, domain.Invalidf("label must be at most 50 characters")
	}
	if s.Has(addr) {
		return AddressWhitelisted{}, domain.Invalidf("Address already whitelisted")
	}
	if len(s.Addresses) >= MaxAddresses {
		return AddressWhitelisted{}, domain.Invalidf("Whitelist limit reached")
	}
	return AddressWhitelisted{CustomerID: customerID, MerchantID: merchantID, Environment: env, AddressID: id,
		WalletAddress: addr, Network: network, Label: label, AddedAt: now}, nil
}

// Remove decides removing the address with id.
func Remove(s State, id string, now time.Time) (AddressRemoved, error) {
	a, ok := s.Find(id)
	if !ok {
		return AddressRemoved{}, domain.Errorf(domain.NotFound, "Address not found")
	}
	return AddressRemoved{AddressID: a.ID, WalletAddress: a.WalletAddress, RemovedAt: now}, nil
}
