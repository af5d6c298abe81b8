package httpapi

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/merchant"
)

// filePath is the path of an uploaded file's URL on the harness's server.
func (h *harness) filePath(url string) string {
	h.t.Helper()
	path, ok := strings.CutPrefix(url, h.api.cfg.PublicURL)
	if !ok || !strings.HasPrefix(path, "/files/") {
		h.t.Fatalf("file url %q", url)
	}
	return path
}

func (h *harness) getFile(url string) resp {
	h.t.Helper()
	return h.do(req{method: "GET", path: h.filePath(url), document: true})
}

func imageURLs(t *testing.T, e map[string]any) []string {
	t.Helper()
	var out []string
	for _, u := range e["imageUrl"].([]any) {
		out = append(out, u.(string))
	}
	return out
}

// TestDeletedEscrowsFilesAreGone: deleting an escrow removes its images
// (they are no longer served), except the images of a listing with units
// sold, which the sold units show too. A replaced or deleted category
// image goes the same way.
func TestDeletedEscrowsFilesAreGone(t *testing.T) {
	h := newHarness(t)
	seller := h.createCustomer(h.sa(), "seller@example.com", "08030000001")
	buyer := h.funded("buyer@example.com", "08030000002", 5000)
	e := h.createEscrow(seller, map[string]string{"amount": "1000", "purpose": "Phone", "whoPays": "buyer"}, 2).
		expect(t, 201, "").obj()
	urls := imageURLs(t, e)
	for _, u := range urls {
		h.getFile(u).expect(t, 200, "")
	}
	h.do(req{method: "DELETE", path: "/v1/escrow/delete/" + e["paymentToken"].(string), key: h.std(), cid: seller}).
		expect(t, 200, "Escrow deleted successfully")
	for _, u := range urls {
		if r := h.getFile(u); r.Status != 404 {
			t.Fatalf("%s of a deleted escrow: %d", u, r.Status)
		}
	}

	// A listing with a unit sold keeps its images for the sold unit.
	link := h.createEscrow(seller, map[string]string{"amount": "1000", "purpose": "Phone", "whoPays": "buyer", "totalQuantity": "2"}, 1).
		expect(t, 201, "").obj()
	h.pay(buyer, "unit-1", 1025, link["id"]).expect(t, 200, "Payment successful")
	h.do(req{method: "DELETE", path: "/v1/escrow/delete/" + link["paymentToken"].(string), key: h.std(), cid: seller}).
		expect(t, 200, "Escrow deleted successfully")
	h.getFile(imageURLs(t, link)[0]).expect(t, 200, "")

	// Categories: a replaced image and a deleted category's image go.
	form, ct := escrowForm(t, map[string]string{"name": "Phones"}, 1)
	cat := h.do(req{method: "POST", path: "/v1/escrow/category/create", key: h.sa(), body: form,
		headers: map[string]string{"Content-Type": ct}}).expect(t, 201, "").obj()
	first := cat["imageUrl"].(string)
	form, ct = escrowForm(t, map[string]string{}, 1)
	edited := h.do(req{method: "PUT", path: "/v1/escrow/category/edit/" + cat["id"].(string), key: h.sa(), body: form,
		headers: map[string]string{"Content-Type": ct}}).expect(t, 200, "").obj()
	second := edited["imageUrl"].(string)
	if second == first {
		t.Fatalf("image not replaced: %v", edited)
	}
	h.getFile(first).expect(t, 404, "File not found")
	h.getFile(second).expect(t, 200, "")
	h.do(req{method: "DELETE", path: "/v1/escrow/category/delete/" + cat["id"].(string), key: h.sa()}).expect(t, 200, "")
	h.getFile(second).expect(t, 404, "File not found")
}

// TestFilesAreServedInert: every file is sandboxed and privately cached;
// only images are shown inline, evidence PDFs are downloads.
func TestFilesAreServedInert(t *testing.T) {
	h := newHarness(t)
	seller := h.createCustomer(h.sa(), "seller@example.com", "08030000001")
	buyer := h.funded("ada@example.com", "08030000002", 20000)
	e := h.createEscrow(seller, map[string]string{"amount": "1000", "purpose": "Phone", "whoPays": "buyer"}, 1).
		expect(t, 201, "").obj()
	img := h.getFile(imageURLs(t, e)[0]).expect(t, 200, "")
	_, token := h.disputedEscrow(seller, buyer, "buyer", 0, nil, 10250)
	d := h.submitDispute(token, seller, "Here is the receipt", uploadPart{"file", "receipt.pdf", "application/pdf", minimalPDF}).
		expect(t, 200, "").obj()
	entries := d["dispute"].([]any)
	proof := entries[len(entries)-1].(map[string]any)["proofUrl"].(string)
	pdf := h.getFile(proof).expect(t, 200, "")
	for name, r := range map[string]resp{"image": img, "pdf": pdf} {
		if r.Header.Get("Content-Security-Policy") != "sandbox" || !strings.HasPrefix(r.Header.Get("Cache-Control"), "private") {
			t.Errorf("%s headers %v", name, r.Header)
		}
	}
	if got := img.Header.Get("Content-Disposition"); got != "" {
		t.Errorf("image Content-Disposition %q", got)
	}
	if got := pdf.Header.Get("Content-Disposition"); got != "attachment" {
		t.Errorf("pdf Content-Disposition %q", got)
	}
}

// TestFilesQuota: a merchant environment's stored files are capped; past
// the cap an upload is 413 Storage quota exceeded and stores nothing, and
// deleting files frees their room.
func TestFilesQuota(t *testing.T) {
	const quota = 200 // bytes: two of escrowForm's tiny images, not four
	h := newHarness(t, func(c *Config) { c.FilesQuota = quota })
	seller := h.createCustomer(h.sa(), "seller@example.com", "08030000001")
	fields := map[string]string{"amount": "1000", "purpose": "Phone", "whoPays": "buyer"}
	e := h.createEscrow(seller, fields, 2).expect(t, 201, "").obj()
	stored := 0
	for _, u := range imageURLs(t, e) {
		stored += len(h.getFile(u).expect(t, 200, "").Raw)
	}
	if stored > quota || 2*stored <= quota {
		t.Fatalf("two images take %d bytes: the test needs them between %d and %d", stored, quota/2, quota)
	}
	h.createEscrow(seller, fields, 2).expect(t, 413, "Storage quota exceeded")
	// The other environment has a quota of its own.
	live := key(h.m, domain.Live, merchant.Standard)
	lseller := h.do(req{method: "POST", path: "/v1/customer/create", key: key(h.m, domain.Live, merchant.SuperAdmin), host: liveHost,
		body: customerBody("live@example.com", "08030000009")}).expect(t, 201, "").obj()["customerId"].(string)
	body, ct := escrowForm(t, fields, 2)
	h.do(req{method: "POST", path: "/v1/escrow/create", key: live, cid: lseller, host: liveHost, body: body,
		headers: map[string]string{"Content-Type": ct}}).expect(t, 201, "")
	h.do(req{method: "DELETE", path: "/v1/escrow/delete/" + e["paymentToken"].(string), key: h.std(), cid: seller}).
		expect(t, 200, "")
	h.createEscrow(seller, fields, 2).expect(t, 201, "")
}

// TestFilesOfTheOldFolderAreServedUntilMoved: a file an older server kept
// in this machine's folder is still served, and goes with its escrow.
func TestFilesOfTheOldFolderAreServedUntilMoved(t *testing.T) {
	folder := t.TempDir()
	h := newHarness(t, func(c *Config) { c.FilesFolder = folder })
	seller := h.createCustomer(h.sa(), "s@x.com", "08035558801")
	e := h.createEscrow(seller, map[string]string{"amount": "1000", "purpose": "x", "whoPays": "buyer"}, 1).expect(t, 201, "").obj()
	url := imageURLs(t, e)[0]
	name := strings.TrimPrefix(h.filePath(url), "/files/")
	// As if stored by an older server: in the folder, not in the store.
	data := uploadPNG(t)
	if err := os.MkdirAll(filepath.Join(folder, filepath.Dir(name)), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(folder, name), data, 0o640); err != nil {
		t.Fatal(err)
	}
	if _, err := h.api.Files().Backend().Delete(context.Background(), name); err != nil {
		t.Fatal(err)
	}
	if got := h.getFile(url).expect(t, 200, ""); !bytes.Equal(got.Raw, data) {
		t.Fatalf("served %d bytes, want the folder's %d", len(got.Raw), len(data))
	}
	h.do(req{method: "DELETE", path: "/v1/escrow/delete/" + e["paymentToken"].(string), key: h.std(), cid: seller}).
		expect(t, 200, "Escrow deleted successfully")
	h.getFile(url).expect(t, 404, "File not found")
	if _, err := os.Stat(filepath.Join(folder, name)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the folder's copy of a deleted escrow's file: %v", err)
	}
}
