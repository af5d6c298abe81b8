package webhooks

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/escrowd/escrowd/domain"
)

// TestASealedBodyIsNeverSentSealed: a message's JSON is sent as it is;
// a sealed body is opened for sending, and a dispatcher without the keys
// to open it refuses it instead of sending the sealed text.
func TestASealedBodyIsNeverSentSealed(t *testing.T) {
	ctx := context.Background()
	id := uuid.New()
	plain := []byte(`{"event":"payment.withdrawal","data":{"accountNumber":"0123456789"}}`)
	if got, err := OpenBody(ctx, nil, id, plain); err != nil || string(got) != string(plain) {
		t.Fatalf("a plain body without a sealer: %q, %v", got, err)
	}
	sealed := []byte(domain.SealedPrefix + "merchant:m_1:AAAA")
	got, err := OpenBody(ctx, nil, id, sealed)
	if err == nil || !strings.Contains(err.Error(), "no keys") {
		t.Fatalf("a sealed body without a sealer: %q, %v", got, err)
	}
	s := placeSealer{}
	stored, err := sealBodies(ctx, s, []Message{{ID: id, MerchantID: "m_1", Body: plain}})
	if err != nil || string(stored[0]) == string(plain) {
		t.Fatalf("sealed bodies %q, %v", stored, err)
	}
	if got, err := OpenBody(ctx, s, id, stored[0]); err != nil || string(got) != string(plain) {
		t.Fatalf("opened %q, %v", got, err)
	}
	if _, err := OpenBody(ctx, s, uuid.New(), stored[0]); err == nil {
		t.Fatal("a body moved to another delivery opens")
	}
}

// placeSealer seals a value as its owner, place and text, which opens
// only at the same place: enough to see where the outbox seals and opens.
type placeSealer struct{}

func (placeSealer) Seal(_ context.Context, owner domain.DataOwner, where, plain string) (string, error) {
	return domain.SealedPrefix + string(owner) + "\x01" + where + "\x01" + plain, nil
}

func (placeSealer) Open(_ context.Context, where, sealed string) (string, error) {
	parts := strings.SplitN(strings.TrimPrefix(sealed, domain.SealedPrefix), "\x01", 3)
	if len(parts) != 3 || parts[1] != where {
		return "", errors.New("sealed for another place")
	}
	return parts[2], nil
}
