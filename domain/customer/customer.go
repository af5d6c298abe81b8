// Package customer is the merchant customer aggregate (a buyer or seller),
// and the reservations that make email and phone unique per merchant and
// environment.
package customer

import (
	"net/mail"
	"regexp"
	"strings"
	"time"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/reference"
)

// Permissions a merchant grants a customer.
type Permissions struct {
	CanBuy      bool `json:"canBuy"`
	CanSell     bool `json:"canSell"`
	CanWithdraw bool `json:"canWithdraw"`
}

// State is the folded customer.
type State struct {
	ID            string
	MerchantID    string
	Environment   domain.Environment
	Firstname     string
	Lastname      string
	Email         string
	Phone         string
	CountryID     string
	BVN           string
	DOB           string
	Blocked       bool
	BlockedReason string
	Permissions   Permissions
	CreatedAt     time.Time
	// Erased: the customer's personal data was erased (their data key
	// destroyed); their money records stay. Every personal field that held
	// a value reads domain.Erased from then on.
	Erased bool
}

// Exists reports whether the customer was created.
func (s State) Exists() bool { return s.ID != "" }

// Events.
type (
	Created struct {
		CustomerID  string             `json:"customerId"`
		MerchantID  string             `json:"merchantId"`
		Environment domain.Environment `json:"environment"`
		Firstname   string             `json:"firstname"`
		Lastname    string             `json:"lastname"`
		Email       string             `json:"email"`
		Phone       string             `json:"phone"`
		CountryID   string             `json:"countryId"`
		BVN         string             `json:"bvn,omitempty"`
		DOB         string             `json:"dob,omitempty"`
		CreatedAt   time.Time          `json:"createdAt"`
	}
	ProfileUpdated struct {
		Firstname *string   `json:"firstname,omitempty"`
		Lastname  *string   `json:"lastname,omitempty"`
		Email     *string   `json:"email,omitempty"`
		UpdatedAt time.Time `json:"updatedAt"`
	}
	PermissionsChanged struct {
		Permissions Permissions `json:"permissions"`
		UpdatedAt   time.Time   `json:"updatedAt"`
	}
	Blocked struct {
		Reason    string    `json:"reason"`
		BlockedAt time.Time `json:"blockedAt"`
	}
	Unblocked struct {
		UnblockedAt time.Time `json:"unblockedAt"`
	}
	// Erased records that the customer's personal data was erased, at the
	// operator's command: their data key is destroyed right after it, so
	// what earlier events sealed with it reads "[erased]" from then on.
	Erased struct {
		ErasedAt time.Time `json:"erasedAt"`
	}
)

func (Created) EventType() string            { return "customer.created" }
func (ProfileUpdated) EventType() string     { return "customer.profile_updated" }
func (PermissionsChanged) EventType() string { return "customer.permissions_changed" }
func (Blocked) EventType() string            { return "customer.blocked" }
func (Unblocked) EventType() string          { return "customer.unblocked" }
func (Erased) EventType() string             { return "customer.erased" }

// Registry decodes customer events.
var Registry = domain.NewRegistry(
	func() domain.Event { return &Created{} },
	func() domain.Event { return &ProfileUpdated{} },
	func() domain.Event { return &PermissionsChanged{} },
	func() domain.Event { return &Blocked{} },
	func() domain.Event { return &Unblocked{} },
	func() domain.Event { return &Erased{} },
)

// Apply folds one event.
func Apply(s State, ev domain.Event) State {
	switch e := ev.(type) {
	case Created:
		s = State{ID: e.CustomerID, MerchantID: e.MerchantID, Environment: e.Environment,
			Firstname: e.Firstname, Lastname: e.Lastname, Email: e.Email, Phone: e.Phone,
			CountryID: e.CountryID, BVN: e.BVN, DOB: e.DOB, CreatedAt: e.CreatedAt,
			Permissions: Permissions{CanBuy: true, CanSell: true, CanWithdraw: true}}
	case ProfileUpdated:
		if e.Firstname != nil {
			s.Firstname = *e.Firstname
		}
		if e.Lastname != nil {
			s.Lastname = *e.Lastname
		}
		if e.Email != nil {
			s.Email = *e.Email
		}
	case PermissionsChanged:
		s.Permissions = e.Permissions
	case Blocked:
		s.Blocked, s.BlockedReason = true, e.Reason
	case Unblocked:
		s.Blocked, s.BlockedReason = false, ""
	case Erased:
		// The state reads as a replay does once the key is destroyed, so a
		// state folded while the key still opened holds nothing personal.
		s.Erased = true
		for _, f := range []*string{&s.Firstname, &s.Lastname, &s.Email, &s.Phone, &s.BVN, &s.DOB, &s.BlockedReason} {
			if *f != "" {
				*f = domain.Erased
			}
		}
	}
	return s
}

// NewCustomer is the validated input of Create.
type NewCustomer struct {
	Firstname, Lastname, Email, Phone, CountryID, BVN, DOB string
}

var (
	digits11 = regexp.MustCompile(`^[0-9]{11}$`)
)

// NormalizeEmail validates an email and returns its canonical (lower-case)
// form, the form uniqueness is decided on.
func NormalizeEmail(raw string) (string, error) {
	e := strings.TrimSpace(raw)
	if e == "" {
		return "", domain.Invalidf("email is required")
	}
	a, err := mail.ParseAddress(e)
	if err != nil || a.Address != e || !strings.Contains(e[strings.LastIndex(e, "@")+1:], ".") || len(e) > 254 {
		return "", domain.Invalidf("email must be a valid email address")
	}
	return strings.ToLower(e), nil
}

// Create validates a new customer for a merchant whose default country is
// merchantCountry and returns the Created event. Uniqueness of email and
// phone is the reservations' job, decided in the same append.
func Create(id, merchantID string, env domain.Environment, merchantCountry string, in NewCustomer, now time.Time) (Created, error) {
	first, err := normalizeName("firstname", in.Firstname)
	if err != nil {
		return Created{}, err
	}
	last, err := normalizeName("lastname", in.Lastname)
	if err != nil {
		return Created{}, err
	}
	email, err := NormalizeEmail(in.Email)
	if err != nil {
		return Created{}, err
	}
	countryRef := in.CountryID
	if strings.TrimSpace(countryRef) == "" {
		countryRef = merchantCountry
	}
	country, ok := reference.FindCountry(countryRef)
	if !ok {
		return Created{}, domain.Invalidf("Invalid country selected")
	}
	if strings.TrimSpace(in.Phone) == "" {
		return Created{}, domain.Invalidf("phone is required")
	}
	phone, ok := reference.NormalizePhone(country, in.Phone)
	if !ok {
		return Created{}, domain.Invalidf("Invalid phone number")
	}
	if in.BVN != "" && !digits11.MatchString(in.BVN) {
		return Created{}, domain.Invalidf("bvn must be 11 digits")
	}
	if in.DOB != "" {
		d, err := time.Parse("2006-01-02", in.DOB)
		if err != nil || !d.Before(now) {
			return Created{}, domain.Invalidf("dob must be a past date in the form YYYY-MM-DD")
		}
	}
	return Created{CustomerID: id, MerchantID: merchantID, Environment: env, Firstname: first, Lastname: last,
		Email: email, Phone: phone, CountryID: country.ID, BVN: in.BVN, DOB: in.DOB, CreatedAt: now}, nil
}

// Update is the input of UpdateProfile: nil fields are unchanged.
type Update struct {
	Firstname, Lastname, Email *string
}

// UpdateProfile decides a profile update. The returned email (canonical) is
// non-empty when it changes, so the caller moves the email reservation.
func UpdateProfile(s State, in Update, now time.Time) (ProfileUpdated, string, error) {
	if s.Erased {
		// Their data key is destroyed: nothing new could be sealed for them.
		return ProfileUpdated{}, "", domain.Invalidf("This customer's personal data was erased")
	}
	if in.Firstname == nil && in.Lastname == nil && in.Email == nil {
		return ProfileUpdated{}, "", domain.Invalidf("Provide at least one of firstname, lastname or email")
	}
	ev := ProfileUpdated{UpdatedAt: now}
	if in.Firstname != nil {
		v, err := normalizeName("firstname", *in.Firstname)
		if err != nil {
			return ev, "", err
		}
		ev.Firstname = &v
	}
	if in.Lastname != nil {
		v, err := normalizeName("lastname", *in.Lastname)
		if err != nil {
			return ev, "", err
		}
		ev.Lastname = &v
	}
	newEmail := ""
	if in.Email != nil {
		v, err := NormalizeEmail(*in.Email)
		if err != nil {
			return ev, "", err
		}
		ev.Email = &v
		if v != s.Email {
			newEmail = v
		}
	}
	return ev, newEmail, nil
}

// MaskBVN shows only the last 4 digits.
func MaskBVN(bvn string) string {
	if len(bvn) <= 4 || bvn == domain.Erased {
		return bvn
	}
	return strings.Repeat("*", len(bvn)-4) + bvn[len(bvn)-4:]
}
