package httpapi

import "testing"

func TestEnumCanonical(t *testing.T) {
	for _, tc := range []struct {
		e        enum
		in, want string
	}{
		{gatewayEnum, "WALLET", "wallet"},
		{gatewayEnum, " Card ", "card"},
		{gatewayEnum, "paypal", "paypal"},
		{whoPaysEnum, "Buyer", "buyer"},
		{whoPaysEnum, "BOTH", "both"},
		{deliveryTimelineEnum, "Hours", "hours"},
		{transactionTypeEnum, "WALLET_TRANSFER", "wallet_transfer"},
		{transactionTypeEnum, "wallet transfer", "wallet transfer"},
		{escrowListingEnum, "SALES", "sales"},
		{escrowListingEnum, "", ""},
		{enum{"COMPLETED", "REFUNDED", "SPLIT"}, "split", "SPLIT"},
	} {
		if got := tc.e.canonical(tc.in); got != tc.want {
			t.Errorf("%v.canonical(%q) = %q, want %q", tc.e, tc.in, got, tc.want)
		}
	}
}
