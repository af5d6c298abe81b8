package checkout

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/domaintest"
	"github.com/escrowd/escrowd/domain/money"
)

var now = time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)

func draft() Draft {
	return Draft{ID: "cs1", FormToken: "tok", MerchantID: "m1", Environment: domain.Test, EscrowID: "e1",
		PaymentToken: "PT_X", CustomerID: "b1", AmountDue: 1_025_00, SuccessURL: "https://shop.example/ok"}
}

func opened(t *testing.T, minutes int) State {
	t.Helper()
	d := draft()
	d.ExpiresInMinutes = minutes
	ev, err := OpenSession(State{}, d, now)
	if err != nil {
		t.Fatal(err)
	}
	return Apply(State{}, ev)
}

func TestOpenSession(t *testing.T) {
	tests := []struct {
		name    string
		edit    func(*Draft)
		expires time.Time
		wantErr error
	}{
		{name: "default lifetime is 60 minutes", expires: now.Add(time.Hour)},
		{name: "shortest lifetime", edit: func(d *Draft) { d.ExpiresInMinutes = 5 }, expires: now.Add(5 * time.Minute)},
		{name: "longest lifetime", edit: func(d *Draft) { d.ExpiresInMinutes = 1440 }, expires: now.Add(24 * time.Hour)},
		{name: "too short", edit: func(d *Draft) { d.ExpiresInMinutes = 4 }, wantErr: ErrBadLifetime},
		{name: "too long", edit: func(d *Draft) { d.ExpiresInMinutes = 1441 }, wantErr: ErrBadLifetime},
		{name: "negative", edit: func(d *Draft) { d.ExpiresInMinutes = -1 }, wantErr: ErrBadLifetime},
		{name: "no escrow", edit: func(d *Draft) { d.EscrowID = "" }, wantErr: ErrMissingEscrow},
		{name: "no buyer", edit: func(d *Draft) { d.CustomerID = "" }, wantErr: ErrMissingCustomer},
		{name: "javascript success URL", edit: func(d *Draft) { d.SuccessURL = "javascript:alert(1)" }, wantErr: ErrBadSuccessURL},
		{name: "relative success URL", edit: func(d *Draft) { d.SuccessURL = "/ok" }, wantErr: ErrBadSuccessURL},
		{name: "success URL with credentials", edit: func(d *Draft) { d.SuccessURL = "https://u:p@shop.example/" }, wantErr: ErrBadSuccessURL},
		{name: "cancel URL other scheme", edit: func(d *Draft) { d.CancelURL = "ftp://shop.example/" }, wantErr: ErrBadCancelURL},
		{name: "no return URLs at all", edit: func(d *Draft) { d.SuccessURL, d.CancelURL = "", "" }, expires: now.Add(time.Hour)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := draft()
			if tt.edit != nil {
				tt.edit(&d)
			}
			ev, err := OpenSession(State{}, d, now)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
			if err != nil {
				return
			}
			if !ev.ExpiresAt.Equal(tt.expires) || ev.At != now || ev.FormToken != "tok" || ev.AmountDue != d.AmountDue {
				t.Fatalf("opened %+v", ev)
			}
			if got := Apply(State{}, ev).StatusAt(now); got != Open {
				t.Fatalf("status %s", got)
			}
		})
	}
	// Return URLs are stored in the log: at most domain.MaxURL characters.
	long := "https://shop.example/" + strings.Repeat("a", domain.MaxURL-len("https://shop.example/"))
	for _, tc := range []struct {
		edit func(*Draft, string)
		msg  string
	}{
		{func(d *Draft, u string) { d.SuccessURL = u }, "successUrl must be at most 2048 characters"},
		{func(d *Draft, u string) { d.CancelURL = u }, "cancelUrl must be at most 2048 characters"},
	} {
		d := draft()
		tc.edit(&d, long)
		if _, err := OpenSession(State{}, d, now); err != nil {
			t.Fatalf("a URL of exactly %d characters: %v", domain.MaxURL, err)
		}
		tc.edit(&d, long+"b")
		if _, err := OpenSession(State{}, d, now); err == nil || err.Error() != tc.msg {
			t.Fatalf("a URL one character too long: %v, want %q", err, tc.msg)
		}
	}
	if _, err := OpenSession(opened(t, 0), draft(), now); !errors.Is(err, ErrAlreadyOpened) {
		t.Fatalf("reopen: %v", err)
	}
}

func TestPayAndCancel(t *testing.T) {
	open := opened(t, 10)
	paid := Apply(open, Paid{Reference: Reference("cs1"), PaymentID: "p1", At: now.Add(time.Minute)})
	cancelled := Apply(open, CancelledByBuyer{At: now.Add(time.Minute)})
	tests := []struct {
		name    string
		s       State
		at      time.Time
		wantErr error
		status  Status
	}{
		{name: "open pays", s: open, at: now.Add(9 * time.Minute), status: Open},
		{name: "last instant before expiry pays", s: open, at: now.Add(10*time.Minute - time.Nanosecond), status: Open},
		{name: "expires at ExpiresAt exactly", s: open, at: now.Add(10 * time.Minute), wantErr: ErrExpired, status: Expired},
		{name: "expired long ago", s: open, at: now.Add(48 * time.Hour), wantErr: ErrExpired, status: Expired},
		{name: "single use", s: paid, at: now.Add(2 * time.Minute), wantErr: ErrUsed, status: Complete},
		{name: "paid stays complete after expiry", s: paid, at: now.Add(time.Hour), wantErr: ErrUsed, status: Complete},
		{name: "cancelled", s: cancelled, at: now.Add(2 * time.Minute), wantErr: ErrCancelled, status: Cancelled},
		{name: "cancelled stays cancelled after expiry", s: cancelled, at: now.Add(time.Hour), wantErr: ErrCancelled, status: Cancelled},
		{name: "unknown", s: State{}, at: now, wantErr: ErrNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.status != "" {
				if got := tt.s.StatusAt(tt.at); got != tt.status {
					t.Fatalf("status %s, want %s", got, tt.status)
				}
			}
			ev, err := Pay(tt.s, "p2", 1000, 0, tt.at)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("pay: err = %v, want %v", err, tt.wantErr)
			}
			if err == nil {
				if ev.Reference != "checkout_cs1" || ev.PaymentID != "p2" || ev.At != tt.at {
					t.Fatalf("paid %+v", ev)
				}
				if got := Apply(tt.s, ev).StatusAt(tt.at); got != Complete {
					t.Fatalf("after pay: %s", got)
				}
			}
			cev, err := Cancel(tt.s, tt.at)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("cancel: err = %v, want %v", err, tt.wantErr)
			}
			if err == nil {
				if got := Apply(tt.s, cev).StatusAt(tt.at); got != Cancelled {
					t.Fatalf("after cancel: %s", got)
				}
				if _, err := Pay(Apply(tt.s, cev), "p3", 1000, 0, tt.at); !errors.Is(err, ErrCancelled) {
					t.Fatalf("pay after cancel: %v", err)
				}
			}
		})
	}
}

// A deposit-only session (a payment link's) pays only what the deposit it
// staged brought in; any other session pays from the wallet as it stands.
func TestDepositOnlySessionPaysOnlyWhatItsDepositCovers(t *testing.T) {
	d := draft()
	d.DepositOnly = true
	o, err := OpenSession(State{}, d, now)
	if err != nil || !o.DepositOnly {
		t.Fatalf("opened %+v, %v", o, err)
	}
	linked, plain := Apply(State{}, o), opened(t, 10)
	at := now.Add(time.Minute)
	tests := []struct {
		name              string
		s                 State
		at                time.Time
		amount, deposited money.Amount
		wantErr           error
	}{
		{"link: no deposit", linked, at, 10_250_00, 0, ErrDepositOnly},
		{"link: deposit short of the amount", linked, at, 10_250_00, 10_249_99, ErrDepositOnly},
		{"link: deposit of the amount", linked, at, 10_250_00, 10_250_00, nil},
		{"link: deposit above the amount", linked, at, 10_250_00, 20_000_00, nil},
		{"plain: from the wallet", plain, at, 10_250_00, 0, nil},
		{"link: an expired session refuses, deposit or not", linked, now.Add(48 * time.Hour), 10_250_00, 10_250_00, ErrExpired},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ev, err := Pay(tt.s, "p", tt.amount, tt.deposited, tt.at)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
			if err == nil && ev.PaymentID != "p" {
				t.Fatalf("paid %+v", ev)
			}
		})
	}
	if domain.ErrorCode(ErrDepositOnly) != domain.Forbidden {
		t.Fatalf("deposit-only refusal: %s", domain.ErrorCode(ErrDepositOnly))
	}
}

func TestErrorsAreGoneOrNotFound(t *testing.T) {
	for _, err := range []error{ErrExpired, ErrUsed, ErrCancelled} {
		if domain.ErrorCode(err) != domain.Gone {
			t.Errorf("%v: %s, want gone (410)", err, domain.ErrorCode(err))
		}
	}
	if domain.ErrorCode(ErrNotFound) != domain.NotFound {
		t.Errorf("not found: %s", domain.ErrorCode(ErrNotFound))
	}
}

func TestEventsRoundTrip(t *testing.T) {
	o, err := OpenSession(State{}, draft(), now)
	if err != nil {
		t.Fatal(err)
	}
	domaintest.RoundTrip(t, Registry, o, Paid{Reference: "checkout_cs1", PaymentID: "p", At: now},
		CancelledByBuyer{At: now})
}
