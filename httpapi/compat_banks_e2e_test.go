package httpapi

import (
	"testing"

	"github.com/escrowd/escrowd/domain/reference"
)

// TestNIPBankCodes: clients written for NIP send the
// 6-digit institution code as bankCode. Account resolution and a bank
// withdrawal by 000013 work as by 058 (the NUBAN check digit is GTBank's),
// and the records keep the code that was sent.
func TestNIPBankCodes(t *testing.T) {
	h := newHarness(t)
	cid := h.funded("w@x.com", "08031110006", 10000)
	acct := nuban(t, "058", "12", false)

	byNIP := h.do(req{method: "POST", path: "/v1/payment/verify-account", key: h.std(), cid: cid,
		body: map[string]any{"accountNumber": acct, "bankCode": "000013"}}).expect(t, 200, "Account details retrieved successfully").obj()
	byCBN := h.do(req{method: "POST", path: "/v1/payment/verify-account", key: h.std(), cid: cid,
		body: map[string]any{"accountNumber": acct, "bankCode": "058"}}).expect(t, 200, "Account details retrieved successfully").obj()
	if byNIP["accountName"] != byCBN["accountName"] || byNIP["accountName"] != reference.TestAccountName("058", acct) ||
		byNIP["bankCode"] != "000013" || byNIP["accountNumber"] != acct {
		t.Fatalf("resolution by NIP code %v, by CBN code %v", byNIP, byCBN)
	}
	// A check digit right for the NIP code read as an institution code is
	// wrong for GTBank.
	d, _ := reference.NUBANCheckDigit("000013", acct[:9])
	if other := acct[:9] + string(d); other != acct {
		h.do(req{method: "POST", path: "/v1/payment/verify-account", key: h.std(), cid: cid,
			body: map[string]any{"accountNumber": other, "bankCode": "000013"}}).expect(t, 400, "Could not resolve account name")
	}

	rec := h.intent(cid, map[string]any{"reference": "wd-nip", "amount": 1000, "transactionType": "withdrawal",
		"withdrawalDetails": map[string]any{"accountNumber": acct, "bankCode": "000013", "narration": "rent"}}).expect(t, 201, "").obj()
	wd := rec["withdrawalDetails"].(map[string]any)
	if wd["bankCode"] != "000013" || wd["bankName"] != "Guaranty Trust Bank" || wd["accountName"] != byCBN["accountName"] {
		t.Fatalf("withdrawal intent %v", rec)
	}
	done := h.verify(cid, "wd-nip").expect(t, 200, "").obj()
	if done["status"] != "success" || done["withdrawalDetails"].(map[string]any)["bankCode"] != "000013" {
		t.Fatalf("withdrawal %v", done)
	}
	h.expectWallet(cid, 8950, 0)
	hist := h.do(req{path: "/v1/payment/history?type=withdrawal", key: h.std(), cid: cid}).expect(t, 200, "")
	list, _ := hist.obj()["data"].([]any)
	if len(list) != 1 || list[0].(map[string]any)["withdrawalDetails"].(map[string]any)["bankCode"] != "000013" {
		t.Fatalf("history %s", hist.Raw)
	}
}
