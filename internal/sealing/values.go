package sealing

import (
	"context"
	"errors"
	"strings"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/internal/keyring"
)

// Values is the domain.Sealer of the values kept outside the log: each is
// sealed alone with its owner's data key and bound to where it is kept
// (an event's field is bound to its type and path, which no place's name
// is), in the log's format, so a sealed value names its subject and opens
// with nothing else.
type Values struct{ keys Keys }

// NewValues is the sealer of values over keys.
func NewValues(keys Keys) Values { return Values{keys: keys} }

// Values is the sealer of the values kept outside the log, with the
// store's keys.
func (s *Store) Values() Values { return Values{keys: s.keys} }

// Sealer is Values as the port (domain.Sealer): what packages that know
// only the store port find the store's sealer by.
func (s *Store) Sealer() domain.Sealer { return s.Values() }

func (v Values) Seal(ctx context.Context, owner domain.DataOwner, where, plain string) (string, error) {
	if plain == "" {
		return "", nil
	}
	out, err := sealValue(ctx, v.keys, keyring.Subject(owner), where, "", plain)
	if errors.Is(err, keyring.ErrErased) {
		return Erased, nil
	}
	return out, err
}

func (v Values) Open(ctx context.Context, where, sealed string) (string, error) {
	if !strings.HasPrefix(sealed, Prefix) {
		return sealed, nil
	}
	return openValue(ctx, v.keys, where, "", sealed)
}
