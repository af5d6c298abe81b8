package paystack

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"
)

// Events shaped as Paystack's documentation shows them read into the
// client's types, whatever form each field takes there.
func TestReadsDocumentedEvents(t *testing.T) {
	e, err := ParseEvent(must(os.ReadFile("testdata/charge_success_dedicated_nuban.json")))
	if err != nil {
		t.Fatal(err)
	}
	tx, err := TransactionOf(e)
	if err != nil {
		t.Fatal(err)
	}
	if e.Event != "charge.success" || tx.Status != TransactionSuccess || tx.Channel != ChannelDedicatedNUBAN ||
		tx.Amount != 500000 || tx.Fees != 5000 || tx.ReceiverAccountNumber != "9930000902" || tx.ReceiverBank != "Wema Bank" ||
		tx.Customer.CustomerCode != "CUS_kpb3qj71u1m0rw8" || tx.Authorization.SenderName != "RANDALL AKANBI HORTON" ||
		!tx.PaidAt.Equal(time.Date(2024, 3, 20, 10, 0, 5, 0, time.UTC)) {
		t.Fatalf("transaction %+v", tx)
	}

	e, err = ParseEvent(must(os.ReadFile("testdata/transfer_reversed.json")))
	if err != nil {
		t.Fatal(err)
	}
	tr, err := TransferOf(e)
	if err != nil {
		t.Fatal(err)
	}
	if tr.Status != TransferReversed || tr.Reference != "jvrjckwenm" || tr.Amount != 10000 ||
		tr.Recipient.RecipientCode != "RCP_hmcj8ciho490bvi" || tr.Recipient.BankCode != "011" ||
		!tr.CreatedAt.Equal(time.Date(2020, 3, 24, 7, 13, 31, 0, time.UTC)) || tr.UpdatedAt.IsZero() {
		t.Fatalf("transfer %+v", tr)
	}
}

// The receiving account is read from the metadata where an answer has it
// there only, and metadata may be an empty string.
func TestReceiverAccountFromMetadata(t *testing.T) {
	for raw, want := range map[string]string{
		`{"metadata":{"receiver_account_number":"9930000737"}}`:                 "9930000737",
		`{"metadata":"{\"receiver_account_number\":\"9930000738\"}"}`:           "9930000738",
		`{"metadata":"","authorization":{"receiver_bank_account_number":null}}`: "",
		`{"metadata":null}`: "",
	} {
		var w wireTransaction
		if err := json.Unmarshal([]byte(raw), &w); err != nil {
			t.Fatalf("%s: %v", raw, err)
		}
		if got := w.transaction().ReceiverAccountNumber; got != want {
			t.Errorf("%s: receiver %q, want %q", raw, got, want)
		}
	}
}

// A listing reads every page, once each record, and stops at pageCount.
func TestListReadsEveryPage(t *testing.T) {
	const total, per = 7, 3
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		if q.Get("perPage") != "3" || q.Get("status") != "success" || q.Get("from") != "2026-11-30T00:00:00Z" {
			t.Errorf("query %s", r.URL.RawQuery)
		}
		page := int(must(parseInt(q.Get("page"))))
		var items []string
		for i := (page-1)*per + 1; i <= min(page*per, total); i++ {
			items = append(items, `{"id":`+itoa(i)+`,"status":"success","reference":"r`+itoa(i)+`","amount":100}`)
		}
		_, _ = io.WriteString(w, `{"status":true,"message":"Transactions retrieved","data":[`+strings.Join(items, ",")+
			`],"meta":{"total":7,"skipped":`+itoa((page-1)*per)+`,"perPage":"3","page":`+itoa(page)+`,"pageCount":3}}`)
	}))
	defer srv.Close()
	c := newTestClient(t, srv, nil)
	txs, err := c.ListTransactions(context.Background(), ListParams{From: time.Date(2026, 11, 30, 1, 0, 0, 0, time.FixedZone("WAT", 3600)),
		Status: "success", PerPage: per})
	if err != nil {
		t.Fatal(err)
	}
	if len(txs) != total || txs[0].Reference != "r1" || txs[6].Reference != "r7" {
		t.Fatalf("%d transactions: %+v", len(txs), txs)
	}
}

func parseInt(s string) (int64, error) {
	var n flexInt
	err := n.UnmarshalJSON([]byte(s))
	return int64(n), err
}

func itoa(i int) string { return string(must(json.Marshal(i))) }

func TestTransferReference(t *testing.T) {
	ids := []string{
		"0193a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b", // a UUID: kept readable
		"0193A1B2-C3D4-7E5F-8A9B-0C1D2E3F4A5B", // the same in upper case: another id
		"wd_1", "x", "", "a/b c", strings.Repeat("a", 47), strings.Repeat("a", 46),
	}
	seen := map[string]string{}
	for _, id := range ids {
		ref := TransferReference(id)
		if err := CheckTransferReference(ref); err != nil {
			t.Errorf("TransferReference(%q) = %q: %v", id, ref, err)
		}
		if ref != TransferReference(id) {
			t.Errorf("TransferReference(%q) is not deterministic", id)
		}
		if other, dup := seen[ref]; dup {
			t.Errorf("ids %q and %q share the reference %q", other, id, ref)
		}
		seen[ref] = id
	}
	if got := TransferReference(ids[0]); got != "esc_"+ids[0] {
		t.Errorf("a UUID's reference is %q, want it readable", got)
	}
	for _, bad := range []string{"short", "UPPER_CASE_REFERENCE", "has space in it here", strings.Repeat("a", 51)} {
		if CheckTransferReference(bad) == nil {
			t.Errorf("CheckTransferReference(%q) accepts it", bad)
		}
	}
}
