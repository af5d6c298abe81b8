package httpapi

import (
	"bytes"
	"encoding/base64"
	"image/png"
	"strings"
	"testing"

	"github.com/makiuchi-d/gozxing"
	"github.com/makiuchi-d/gozxing/qrcode"
)

// expectMasterExtras checks the fields the public API adds to the master wallet
// address (walletAddress, a QR code a decoder reads back as the address,
// instructions) and removes them from r, leaving the spec's fields.
func expectMasterExtras(t *testing.T, r map[string]any, addr string) {
	t.Helper()
	if r["walletAddress"] != addr {
		t.Fatalf("walletAddress %v, want %s", r["walletAddress"], addr)
	}
	qr, _ := r["qrCode"].(string)
	if got := decodeQR(t, qr); got != addr {
		t.Fatalf("the QR code reads %q, want %s", got, addr)
	}
	ins, _ := r["instructions"].(string)
	if !strings.Contains(ins, "BEP-20") || !strings.Contains(ins, "BSC") || !strings.Contains(ins, "whitelisted") {
		t.Fatalf("instructions %q", ins)
	}
	delete(r, "walletAddress")
	delete(r, "qrCode")
	delete(r, "instructions")
}

// decodeQR reads a data:image/png;base64 QR code with a real decoder.
func decodeQR(t *testing.T, dataURL string) string {
	t.Helper()
	b64, ok := strings.CutPrefix(dataURL, "data:image/png;base64,")
	if !ok {
		t.Fatalf("qrCode %.40q is not a PNG data URL", dataURL)
	}
	raw, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(raw))
	if err != nil {
		t.Fatalf("qrCode is not a PNG: %v", err)
	}
	bmp, err := gozxing.NewBinaryBitmapFromImage(img)
	if err != nil {
		t.Fatal(err)
	}
	res, err := qrcode.NewQRCodeReader().Decode(bmp, nil)
	if err != nil {
		t.Fatalf("no QR code in the image: %v", err)
	}
	return res.GetText()
}
