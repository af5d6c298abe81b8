package httpapi

import "testing"

// TestWalletTransferToAReceiverBlockedSinceStaging: a receiver blocked
// between staging and verify receives nothing: verify refuses it with the
// message staging gives for a blocked receiver, and no money moves on
// either side; unblocked, the same intent goes through once.
func TestWalletTransferToAReceiverBlockedSinceStaging(t *testing.T) {
	h := newHarness(t)
	a := h.funded("blk-a@x.com", "08031110017", 5000)
	b := h.createCustomer(h.sa(), "blk-b@x.com", "08031110018")
	h.intent(a, map[string]any{"reference": "t-blocked", "amount": 700, "transactionType": "wallet_transfer",
		"walletDetails": map[string]any{"phone": "08031110018", "narration": "rent"}}).expect(t, 201, "")
	h.do(req{method: "PUT", path: "/v1/customer/block/" + b, key: h.sa(), body: map[string]any{"reason": "fraud"}}).expect(t, 200, "Customer blocked successfully")
	h.verify(a, "t-blocked").expect(t, 400, "The recipient's account is disabled")
	h.expectWallet(a, 5000, 0)
	h.do(req{method: "PUT", path: "/v1/customer/unblock/" + b, key: h.sa()}).expect(t, 200, "")
	h.verify(a, "t-blocked").expect(t, 200, "")
	h.verify(a, "t-blocked").expect(t, 200, "")
	h.expectWallet(a, 4300, 0)
	h.expectWallet(b, 700, 0)
}
