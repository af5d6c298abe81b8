package whitelist

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/domaintest"
)

var now = time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)

const addrA = "0xAbCdEf0123456789abcdef0123456789ABCDEF01"

func added(id, addr string) AddressWhitelisted {
	return AddressWhitelisted{CustomerID: "c1", MerchantID: "m1", Environment: domain.Test, AddressID: id,
		WalletAddress: addr, Network: NetworkBSC, AddedAt: now.Add(-time.Hour)}
}

func fold(events ...domain.Event) State {
	var s State
	for _, e := range events {
		s = Apply(s, e)
	}
	return s
}

// full is a whitelist at the limit.
func full() []domain.Event {
	var out []domain.Event
	for i := 0; i < MaxAddresses; i++ {
		out = append(out, added(fmt.Sprintf("a%d", i), fmt.Sprintf("0x%040x", i+1)))
	}
	return out
}

func TestAdd(t *testing.T) {
	tests := []struct {
		name    string
		given   []domain.Event
		in      NewAddress
		want    domain.Event
		wantErr string
	}{
		{name: "first address, trimmed, network normalised",
			in: NewAddress{WalletAddress: " " + addrA + " ", Network: "bsc", Label: " Ledger "},
			want: AddressWhitelisted{CustomerID: "c1", MerchantID: "m1", Environment: domain.Test, AddressID: "new",
				WalletAddress: addrA, Network: "BSC", Label: "Ledger", AddedAt: now}},
		{name: "label optional", in: NewAddress{WalletAddress: addrA, Network: "BSC"},
			want: AddressWhitelisted{CustomerID: "c1", MerchantID: "m1", Environment: domain.Test, AddressID: "new",
				WalletAddress: addrA, Network: "BSC", AddedAt: now}},
		{name: "label of exactly 50 multi-byte characters", in: NewAddress{WalletAddress: addrA, Network: "BSC", Label: strings.Repeat("é", 50)},
			want: AddressWhitelisted{CustomerID: "c1", MerchantID: "m1", Environment: domain.Test, AddressID: "new",
				WalletAddress: addrA, Network: "BSC", Label: strings.Repeat("é", 50), AddedAt: now}},
		{name: "missing address", in: NewAddress{Network: "BSC"}, wantErr: "walletAddress must be 0x followed by 40 hexadecimal characters"},
		{name: "short address", in: NewAddress{WalletAddress: addrA[:41], Network: "BSC"}, wantErr: "walletAddress must be 0x followed by 40 hexadecimal characters"},
		{name: "non-hex address", in: NewAddress{WalletAddress: "0x" + strings.Repeat("g", 40), Network: "BSC"}, wantErr: "walletAddress must be 0x followed by 40 hexadecimal characters"},
		{name: "no 0x prefix", in: NewAddress{WalletAddress: "00" + addrA[2:], Network: "BSC"}, wantErr: "walletAddress must be 0x followed by 40 hexadecimal characters"},
		{name: "other network", in: NewAddress{WalletAddress: addrA, Network: "ETH"}, wantErr: "network must be BSC"},
		{name: "missing network", in: NewAddress{WalletAddress: addrA}, wantErr: "network must be BSC"},
		{name: "label too long", in: NewAddress{WalletAddress: addrA, Network: "BSC", Label: strings.Repeat("x", 51)}, wantErr: "label must be at most 50 characters"},
		{name: "duplicate in another case", given: []domain.Event{added("a1", addrA)},
			in: NewAddress{WalletAddress: strings.ToLower(addrA), Network: "BSC"}, wantErr: "Address already whitelisted"},
		{name: "limit reached", given: full(), in: NewAddress{WalletAddress: addrA, Network: "BSC"}, wantErr: "Whitelist limit reached"},
		{name: "removal frees a slot", given: append(full(), AddressRemoved{AddressID: "a3"}),
			in: NewAddress{WalletAddress: addrA, Network: "BSC"},
			want: AddressWhitelisted{CustomerID: "c1", MerchantID: "m1", Environment: domain.Test, AddressID: "new",
				WalletAddress: addrA, Network: "BSC", AddedAt: now}},
		{name: "removed address may be added again", given: []domain.Event{added("a1", addrA), AddressRemoved{AddressID: "a1"}},
			in: NewAddress{WalletAddress: addrA, Network: "BSC"},
			want: AddressWhitelisted{CustomerID: "c1", MerchantID: "m1", Environment: domain.Test, AddressID: "new",
				WalletAddress: addrA, Network: "BSC", AddedAt: now}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Add(fold(tt.given...), "new", "c1", "m1", domain.Test, tt.in, now)
			if tt.wantErr != "" {
				if err == nil || domain.ErrorMessage(err) != tt.wantErr || domain.ErrorCode(err) != domain.Invalid {
					t.Fatalf("err = %v, want 400 %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(domain.Event(got), tt.want) {
				t.Fatalf("got %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

func TestRemove(t *testing.T) {
	tests := []struct {
		name     string
		given    []domain.Event
		id       string
		want     domain.Event
		wantErr  string
		wantCode domain.Code
	}{
		{name: "known id", given: []domain.Event{added("a1", addrA)}, id: "a1",
			want: AddressRemoved{AddressID: "a1", WalletAddress: addrA, RemovedAt: now}},
		{name: "unknown id", given: []domain.Event{added("a1", addrA)}, id: "zz", wantErr: "Address not found", wantCode: domain.NotFound},
		{name: "already removed", given: []domain.Event{added("a1", addrA), AddressRemoved{AddressID: "a1"}}, id: "a1",
			wantErr: "Address not found", wantCode: domain.NotFound},
		{name: "empty whitelist", id: "a1", wantErr: "Address not found", wantCode: domain.NotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Remove(fold(tt.given...), tt.id, now)
			if tt.wantErr != "" {
				if err == nil || domain.ErrorMessage(err) != tt.wantErr || domain.ErrorCode(err) != tt.wantCode {
					t.Fatalf("err = %v, want %s %q", err, tt.wantCode, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(domain.Event(got), tt.want) {
				t.Fatalf("got %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

func TestHasIsCaseInsensitive(t *testing.T) {
	s := fold(added("a1", addrA))
	for _, q := range []string{addrA, strings.ToLower(addrA), "0x" + strings.ToUpper(addrA[2:]), " " + addrA} {
		if !s.Has(q) {
			t.Errorf("Has(%q) = false", q)
		}
	}
	if s.Has("0x" + strings.Repeat("0", 40)) {
		t.Error("Has of another address")
	}
	if fold(added("a1", addrA), AddressRemoved{AddressID: "a1"}).Has(addrA) {
		t.Error("removed address still whitelisted")
	}
}

// Apply must not change a state it was given: the engine's cache shares them.
func TestApplyIsCopyOnWrite(t *testing.T) {
	base := fold(added("a1", addrA), added("a2", "0x"+strings.Repeat("1", 40)))
	// Spare capacity, which an in-place append would use.
	base.Addresses = append(make([]Address, 0, 4), base.Addresses...)
	snapshot := slices.Clone(base.Addresses)
	a := Apply(base, added("a3", "0x"+strings.Repeat("2", 40)))
	b := Apply(base, added("a4", "0x"+strings.Repeat("3", 40)))
	if a.Addresses[2].ID != "a3" || b.Addresses[2].ID != "a4" {
		t.Fatalf("appends share storage: %v %v", a.Addresses, b.Addresses)
	}
	r := Apply(base, AddressRemoved{AddressID: "a1"})
	if len(r.Addresses) != 1 || r.Addresses[0].ID != "a2" {
		t.Fatalf("remove: %v", r.Addresses)
	}
	if !reflect.DeepEqual(base.Addresses, snapshot) {
		t.Fatalf("base changed: %v", base.Addresses)
	}
}

func TestEventsRoundTrip(t *testing.T) {
	domaintest.RoundTrip(t, Registry, added("a1", addrA), AddressRemoved{AddressID: "a1", WalletAddress: addrA, RemovedAt: now})
}
