package bench

import (
	stdjson "encoding/json"
	"testing"
	"time"

	json "github.com/go-json-experiment/json/v1"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/money"
	"github.com/escrowd/escrowd/domain/payment"
)

// BenchmarkEventCodec measures encoding and decoding the events of a settled
// top-up (a payment's intent_created and settled, 468 and 770 bytes) with
// the standard library's encoding/json and with encoding/json's API on the
// json/v2 engine (github.com/go-json-experiment/json/v1). Events are
// encoded once per append and decoded by every projector and the webhook
// subscriber that reads them; decoding is twice as fast on v2 and encoding
// no faster, so domain.Unmarshal decodes with v2 and encoding stays on the
// standard library.
func BenchmarkEventCodec(b *testing.B) {
	id := "01a2035c-477e-7a37-bc34-05337931f14c"
	created, settled, err := payment.TopUp(payment.Intent{ID: id, Reference: "TOPUP-" + id, Amount: money.Naira(5000),
		CustomerID: "cus-" + id, MerchantID: "01a2035c-451f-77f5-b4e3-01aa85bbfe59", Environment: domain.Test,
		At: time.Date(2026, 11, 22, 13, 14, 41, 857743257, time.UTC)})
	if err != nil {
		b.Fatal(err)
	}
	events := []domain.Event{created, settled}
	codecs := []struct {
		name      string
		marshal   func(any) ([]byte, error)
		unmarshal func([]byte, any) error
	}{
		{"encoding-json", stdjson.Marshal, stdjson.Unmarshal},
		{"json-v1-on-v2", json.Marshal, json.Unmarshal},
	}
	for _, c := range codecs {
		b.Run("encode/"+c.name, func(b *testing.B) {
			for b.Loop() {
				for _, ev := range events {
					if _, err := c.marshal(ev); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
		b.Run("decode/"+c.name, func(b *testing.B) {
			data := make([][]byte, len(events))
			for i, ev := range events {
				if data[i], err = stdjson.Marshal(ev); err != nil {
					b.Fatal(err)
				}
			}
			for b.Loop() {
				for i, ev := range events {
					ptr := payment.Registry[ev.EventType()]()
					if err := c.unmarshal(data[i], ptr); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
	}
}
