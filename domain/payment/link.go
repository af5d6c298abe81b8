package payment

import (
	"crypto/sha256"
	"encoding/hex"

	"github.com/escrowd/escrowd/domain"
)

// PayoutLink names the withdrawal a provider's payout reference pays, so
// that a provider's event about a payout (which names only the provider's
// reference) finds its withdrawal at once, without waiting for a read
// model. It is written in the same append as the debit, so no payout can
// be sent without it.
type PayoutLink struct {
	MerchantID  string             `json:"merchantId"`
	Environment domain.Environment `json:"environment"`
	Reference   string             `json:"reference"` // the withdrawal's own (the client's) reference
}

// Exists reports whether the link has been written.
func (l PayoutLink) Exists() bool { return l.MerchantID != "" }

// PayoutLinked records a payout's link.
type PayoutLinked struct {
	PayoutLink
	ProviderReference string `json:"providerReference"`
}

func (PayoutLinked) EventType() string { return "payoutlink.linked" }

// PayoutLinkRegistry decodes payout link events.
var PayoutLinkRegistry = domain.NewRegistry(func() domain.Event { return &PayoutLinked{} })

// PayoutLinkID is the link stream id of a provider's payout reference in
// an environment (hashed, so any provider string makes a stream name).
func PayoutLinkID(env domain.Environment, providerRef string) string {
	sum := sha256.Sum256([]byte(providerRef))
	return string(env) + "." + hex.EncodeToString(sum[:16])
}

// ApplyPayoutLink folds a link event; the first link stands.
func ApplyPayoutLink(l PayoutLink, ev domain.Event) PayoutLink {
	if e, ok := ev.(PayoutLinked); ok && !l.Exists() {
		return e.PayoutLink
	}
	return l
}
