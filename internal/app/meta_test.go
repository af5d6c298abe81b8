package app

import (
	"strings"
	"testing"
	"time"

	"github.com/escrowd/escrowd/domain"
)

// TestMetadataLeadsWithTheTenant: the metadata every event is stored with
// names its merchant, then its environment, first and unescaped, the shape
// eventstore.TenantOf reads without a decoder (tenantOfMeta); in any other
// shape every reader of the log would read the tenant token by token.
func TestMetadataLeadsWithTheTenant(t *testing.T) {
	b, err := marshalMeta(domain.Meta{MerchantID: "m1", Environment: domain.Live, Actor: "k", RequestID: "r", OccurredAt: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"merchantId":"m1","environment":"live",`; !strings.HasPrefix(string(b), want) {
		t.Fatalf("metadata %s does not start with %s", b, want)
	}
}
