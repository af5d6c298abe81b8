package projections

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/customer"
	"github.com/escrowd/escrowd/domain/reference"
	"github.com/escrowd/escrowd/eventstore"
)

// Queries reads the read models.
type Queries struct {
	pool *pgxpool.Pool
	// sealer opens the sealed values of the rows (nil: the read models
	// were written by projectors without one, and a sealed value is an
	// error).
	sealer domain.Sealer
}

// NewQueries returns read-model queries on pool, opening the sealed values
// of the rows with sealer (the projectors' sealer; nil when they have none).
func NewQueries(pool *pgxpool.Pool, sealer domain.Sealer) *Queries {
	return &Queries{pool: pool, sealer: sealer}
}

// KeyRow is an API key with its merchant's auth-relevant settings.
type KeyRow struct {
	KeyID       string
	MerchantID  string
	Environment domain.Environment
	Role        string
	Business    bool
	Country     string
	Allowlist   []string
	// ExpiresAt is when the key stops being accepted (nil: never).
	ExpiresAt *time.Time
}

// Which keys authenticate, and what of them auth reads. The digest is $1;
// scan with keyTargets.
const (
	keyColumns = `k.key_id, k.merchant_id, k.environment, k.role, m.business, m.country, m.allowlist, k.expires_at`
	keyFrom    = `rm_api_keys k JOIN rm_merchants m USING (merchant_id)`
	keyWhere   = `k.digest = $1 AND NOT k.revoked`
)

// keyTargets are the scan targets of keyColumns; env receives the
// environment's text.
func (k *KeyRow) keyTargets(env *string) []any {
	return []any{&k.KeyID, &k.MerchantID, env, &k.Role, &k.Business, &k.Country, &k.Allowlist, &k.ExpiresAt}
}

// Country is the embedded country of a customer record.
type Country struct {
	ID      string `json:"id"`
	Name    string `json:"name"`
	ISOCode string `json:"isoCode"`
}

// Customer is the customer record the API answers.
type Customer struct {
	CustomerID    string               `json:"customerId"`
	Firstname     string               `json:"firstname"`
	Lastname      string               `json:"lastname"`
	Email         string               `json:"email"`
	Phone         string               `json:"phone"`
	BVN           *string              `json:"bvn"`
	DOB           *string              `json:"dob"`
	Status        string               `json:"status"`
	BlockedReason *string              `json:"blockedReason"`
	BlockedAt     *time.Time           `json:"blockedAt"`
	Permissions   customer.Permissions `json:"permissions"`
	CountryID     string               `json:"countryId"`
	Country       Country              `json:"country"`
	MerchantID    string               `json:"merchantId"`
	Environment   string               `json:"environment"`
	CreatedAt     time.Time            `json:"createdAt"`
	UpdatedAt     time.Time            `json:"updatedAt"`
}

const customerColumns = `customer_id, firstname, lastname, email, phone, bvn, dob, status, blocked_reason, blocked_at,
	can_buy, can_sell, can_withdraw, country_id, merchant_id, environment, created_at, updated_at`

func scanCustomer(row pgx.Row) (Customer, error) { return scanCustomerWith(row) }

// scanCustomerWith scans customerColumns, then tail.
func scanCustomerWith(row pgx.Row, tail ...any) (Customer, error) {
	var (
		c        Customer
		bvn, dob string
	)
	err := row.Scan(append([]any{&c.CustomerID, &c.Firstname, &c.Lastname, &c.Email, &c.Phone, &bvn, &dob, &c.Status,
		&c.BlockedReason, &c.BlockedAt, &c.Permissions.CanBuy, &c.Permissions.CanSell, &c.Permissions.CanWithdraw,
		&c.CountryID, &c.MerchantID, &c.Environment, &c.CreatedAt, &c.UpdatedAt}, tail...)...)
	if err != nil {
		return c, err
	}
	// As kept: openCustomer opens them (and masks the BVN).
	if bvn != "" {
		c.BVN = &bvn
	}
	if dob != "" {
		c.DOB = &dob
	}
	if ct, ok := reference.FindCountry(c.CountryID); ok {
		c.Country = Country{ID: ct.ID, Name: ct.Name, ISOCode: ct.ISOCode}
	}
	c.CreatedAt, c.UpdatedAt = c.CreatedAt.UTC(), c.UpdatedAt.UTC()
	return c, nil
}

// openCustomer opens the sealed fields of a customer as scanned, and
// masks the BVN.
func (q *Queries) openCustomer(ctx context.Context, c *Customer) error {
	err := q.openAll(ctx, []string{customerFirstname, customerLastname, customerEmail, customerPhone, customerBVN, customerDOB, customerReason},
		&c.Firstname, &c.Lastname, &c.Email, &c.Phone, c.BVN, c.DOB, c.BlockedReason)
	if err != nil {
		return err
	}
	if c.BVN != nil {
		m := customer.MaskBVN(*c.BVN)
		c.BVN = &m
	}
	return nil
}

// CustomerByID returns any customer (auth decides ownership).
func (q *Queries) CustomerByID(ctx context.Context, id string) (Customer, bool, error) {
	c, err := scanCustomer(q.pool.QueryRow(ctx, `SELECT `+customerColumns+` FROM rm_customers WHERE customer_id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return c, false, nil
	}
	if err != nil {
		return c, false, err
	}
	return c, true, q.openCustomer(ctx, &c)
}

// FirstCustomerOf is the earliest created of the merchant environment's
// customers ids (the holders of an email or phone, found by their blind
// index): lookups by contact never compare stored values.
func (q *Queries) FirstCustomerOf(ctx context.Context, merchantID string, env domain.Environment, ids []string) (Customer, bool, error) {
	if len(ids) == 0 {
		return Customer{}, false, nil
	}
	c, err := scanCustomer(q.pool.QueryRow(ctx, `SELECT `+customerColumns+` FROM rm_customers
		WHERE merchant_id = $1 AND environment = $2 AND customer_id = ANY($3) ORDER BY created_at LIMIT 1`, merchantID, string(env), ids))
	if errors.Is(err, pgx.ErrNoRows) {
		return c, false, nil
	}
	if err != nil {
		return c, false, err
	}
	return c, true, q.openCustomer(ctx, &c)
}

// MerchantCountry returns a merchant's default country (ISO code).
func (q *Queries) MerchantCountry(ctx context.Context, merchantID string) (string, error) {
	var c string
	err := q.pool.QueryRow(ctx, `SELECT country FROM rm_merchants WHERE merchant_id = $1`, merchantID).Scan(&c)
	return c, err
}

// Pool exposes the read-model database (for components sharing it).
func (q *Queries) Pool() *pgxpool.Pool { return q.pool }

// CustomerAuth is what authentication needs of a customer.
type CustomerAuth struct {
	CustomerID  string
	MerchantID  string
	Environment domain.Environment
	Blocked     bool
	Permissions customer.Permissions
}

// AuthAnswer is what KeyAndCustomerAt found, and how current it is.
type AuthAnswer struct {
	Key           KeyRow
	KeyFound      bool
	Customer      CustomerAuth
	CustomerFound bool
	// Covers is the log position the rows include at least: the older of
	// the merchants' and customers' projectors' checkpoints, read in the
	// same statement. Covered is false when one of them is not stored.
	Covers  eventstore.Position
	Covered bool
}

// KeyAndCustomerAt resolves an unrevoked key and (when customerID is not
// empty) a customer in one round trip, the auth path of every request
// the auth cache cannot answer, with the position the answer covers (when
// the key is found): the cache must know whether an answer predates a
// change it has already seen in the log. The customer is reported whether
// or not it belongs to the key's merchant; auth decides.
func (q *Queries) KeyAndCustomerAt(ctx context.Context, digest, customerID string) (AuthAnswer, error) {
	var (
		a                     AuthAnswer
		env                   string
		cid, cmid, cenv, cst  *string
		canBuy, canSell, canW *bool
		commits, prepares     []int64
	)
	// The checkpoints are aggregated ordered by name, so both arrays pair
	// up; a missing row shows as a short array.
	err := q.pool.QueryRow(ctx, `SELECT `+keyColumns+`,
			c.customer_id, c.merchant_id, c.environment, c.status, c.can_buy, c.can_sell, c.can_withdraw, cp.commits, cp.prepares
		FROM `+keyFrom+` LEFT JOIN rm_customers c ON c.customer_id = $2
		CROSS JOIN LATERAL (SELECT array_agg(commit_pos ORDER BY name) AS commits, array_agg(prepare_pos ORDER BY name) AS prepares
		                      FROM projection_checkpoints WHERE name IN ('`+Merchants{}.Name()+`', '`+Customers{}.Name()+`')) cp
		WHERE `+keyWhere, digest, customerID).
		Scan(append(a.Key.keyTargets(&env), &cid, &cmid, &cenv, &cst, &canBuy, &canSell, &canW, &commits, &prepares)...)
	if errors.Is(err, pgx.ErrNoRows) {
		return AuthAnswer{}, nil
	}
	if err != nil {
		return AuthAnswer{}, err
	}
	a.Key.Environment = domain.Environment(env)
	a.KeyFound = true
	if len(commits) == 2 && len(prepares) == 2 {
		a.Covered = true
		a.Covers = eventstore.Position{Commit: uint64(commits[0]), Prepare: uint64(prepares[0])}
		if p := (eventstore.Position{Commit: uint64(commits[1]), Prepare: uint64(prepares[1])}); p.Less(a.Covers) {
			a.Covers = p
		}
	}
	if cid != nil {
		a.CustomerFound = true
		a.Customer = CustomerAuth{CustomerID: *cid, MerchantID: *cmid, Environment: domain.Environment(*cenv),
			Blocked: *cst == "blocked", Permissions: customer.Permissions{CanBuy: *canBuy, CanSell: *canSell, CanWithdraw: *canW}}
	}
	return a, nil
}

// KeyListing is one of a merchant's API keys as `escrowd key list` shows
// it. LastUsedAt comes from api_key_uses, which the serving processes
// write outside the event log (httpapi.KeyUses), so a rebuild keeps it.
type KeyListing struct {
	KeyID       string             `json:"keyId"`
	Environment domain.Environment `json:"environment"`
	Role        string             `json:"role"`
	Hint        string             `json:"hint"`
	Revoked     bool               `json:"revoked"`
	IssuedAt    time.Time          `json:"issuedAt"`
	ExpiresAt   *time.Time         `json:"expiresAt"`
	LastUsedAt  *time.Time         `json:"lastUsedAt"`
}

// Keys lists a merchant's API keys, oldest first.
func (q *Queries) Keys(ctx context.Context, merchantID string) ([]KeyListing, error) {
	rows, err := q.pool.Query(ctx, `SELECT k.key_id, k.environment, k.role, k.hint, k.revoked, k.issued_at, k.expires_at, u.last_used_at
		FROM rm_api_keys k LEFT JOIN api_key_uses u USING (key_id)
		WHERE k.merchant_id = $1 ORDER BY k.issued_at, k.key_id`, merchantID)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (KeyListing, error) {
		var k KeyListing
		var env string
		err := r.Scan(&k.KeyID, &env, &k.Role, &k.Hint, &k.Revoked, &k.IssuedAt, &k.ExpiresAt, &k.LastUsedAt)
		k.Environment = domain.Environment(env)
		return k, err
	})
}
