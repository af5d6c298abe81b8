package projections

import (
	"context"
	"encoding/json"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/merchant"
	"github.com/escrowd/escrowd/eventstore"
)

// Merchants builds the merchant directory: merchants and their API keys
// (by digest), read on every request by auth.
type Merchants struct{}

func (Merchants) StreamPrefixes() []string { return []string{"merchant-"} }
func (Merchants) Name() string             { return MerchantsName }
func (Merchants) Tables() []string         { return []string{"rm_merchants", "rm_api_keys"} }
func (Merchants) Schema() string {
	return `
CREATE TABLE IF NOT EXISTS rm_merchants (
    merchant_id     text PRIMARY KEY,
    name            text NOT NULL,
    business        boolean NOT NULL,
    country         text NOT NULL,
    fees            jsonb NOT NULL,
    webhook_test    text NOT NULL DEFAULT '',
    webhook_live    text NOT NULL DEFAULT '',
    allowlist       text[] NOT NULL DEFAULT '{}',
    created_at      timestamptz NOT NULL
);
CREATE TABLE IF NOT EXISTS rm_api_keys (
    digest       text PRIMARY KEY,
    key_id       text NOT NULL UNIQUE,
    merchant_id  text NOT NULL,
    environment  text NOT NULL,
    role         text NOT NULL,
    hint         text NOT NULL,
    revoked      boolean NOT NULL DEFAULT false,
    issued_at    timestamptz NOT NULL
);
ALTER TABLE rm_api_keys ADD COLUMN IF NOT EXISTS expires_at timestamptz;
-- Signing secrets are read from the merchant's events when a delivery is
-- signed, never from here: a copy would put every merchant's secret in
-- each backup of the read models.
ALTER TABLE rm_merchants DROP COLUMN IF EXISTS secret_test, DROP COLUMN IF EXISTS secret_live;`
}

func (Merchants) Apply(ctx context.Context, tx pgx.Tx, events []eventstore.RecordedEvent) error {
	for _, re := range events {
		if !strings.HasPrefix(re.Stream, "merchant-") {
			continue
		}
		ev, err := merchant.Registry.Decode(re.Type, re.Data)
		if err != nil {
			return err
		}
		id := strings.TrimPrefix(re.Stream, "merchant-")
		switch e := ev.(type) {
		case merchant.Created:
			fees, _ := json.Marshal(e.Fees)
			_, err = tx.Exec(ctx, `INSERT INTO rm_merchants (merchant_id, name, business, country, fees, created_at)
				VALUES ($1,$2,$3,$4,$5,$6) ON CONFLICT (merchant_id) DO NOTHING`,
				id, e.Name, e.Business, e.Country, fees, e.CreatedAt)
		case merchant.KeyIssued:
			var expires *time.Time
			if !e.ExpiresAt.IsZero() {
				expires = &e.ExpiresAt
			}
			_, err = tx.Exec(ctx, `INSERT INTO rm_api_keys (digest, key_id, merchant_id, environment, role, hint, issued_at, expires_at)
				VALUES ($1,$2,$3,$4,$5,$6,$7,$8) ON CONFLICT (digest) DO NOTHING`,
				e.Digest, e.ID, id, string(e.Environment), string(e.Role), e.Hint, e.IssuedAt, expires)
		case merchant.KeyRevoked:
			_, err = tx.Exec(ctx, `UPDATE rm_api_keys SET revoked = true WHERE key_id = $1`, e.KeyID)
		case merchant.WebhookURLSet:
			_, err = tx.Exec(ctx, `UPDATE rm_merchants SET webhook_`+envColumn(e.Environment)+` = $2 WHERE merchant_id = $1`, id, e.URL)
		case merchant.AllowlistSet:
			_, err = tx.Exec(ctx, `UPDATE rm_merchants SET allowlist = $2 WHERE merchant_id = $1`, id, nonNil(e.Entries))
		case merchant.FeesSet:
			fees, _ := json.Marshal(e.Fees)
			_, err = tx.Exec(ctx, `UPDATE rm_merchants SET fees = $2 WHERE merchant_id = $1`, id, fees)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// envColumn is the column suffix of an environment (never user input).
func envColumn(env domain.Environment) string {
	if env == domain.Live {
		return "live"
	}
	return "test"
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
