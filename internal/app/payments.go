package app

import (
	"context"
	"strings"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/customer"
	"github.com/escrowd/escrowd/domain/ledger"
	"github.com/escrowd/escrowd/domain/money"
	"github.com/escrowd/escrowd/domain/payment"
	"github.com/escrowd/escrowd/domain/reference"
	"github.com/escrowd/escrowd/domain/wallet"
	"github.com/escrowd/escrowd/domain/whitelist"
	"github.com/escrowd/escrowd/eventstore"
	"github.com/escrowd/escrowd/internal/gateway"
)

// Errors of the payment use cases.
var (
	ErrPaymentsNotConfigured = domain.Invalidf("Payments are not configured for this environment")
	ErrCryptoNotConfigured   = domain.Invalidf("Crypto is not configured for this environment")
	ErrAccessDenied          = domain.Errorf(domain.Unauthenticated, "Access denied")
	// ErrPayoutUnanswered: the debit stands and the payout's outcome is
	// unknown; verifying again (the same request) asks the provider again.
	ErrPayoutUnanswered = &domain.Error{Code: domain.Unavailable, Resumable: true,
		Message: "The payout provider did not answer; verify again later"}
)

// IntentRequest is a create-intent after decoding.
type IntentRequest struct {
	Reference  string
	Type       ledger.Type
	Amount     money.Amount
	Narration  string
	Withdrawal *ledger.WithdrawalDetails
	Blockchain *ledger.BlockchainDetails
	Wallet     *ledger.WalletDetails // Phone and Narration as sent
	EscrowIDs  []string              // an escrow payment's escrows
	// Gateway is how an escrow payment is paid: "" from the wallet, or
	// "card", "bank", "ussd" at the provider, which sends the payer back
	// to CallbackURL.
	Gateway     string
	CallbackURL string
}

// IntentResult is a staged intent.
type IntentResult struct {
	Record      ledger.Record
	TestAccount *payment.TestAccount
	// DepositAccount is where a deposit collected through a provider is
	// transferred; AuthorizationURL the page an escrow payment by card,
	// bank or USSD is completed on.
	DepositAccount   *payment.BankAccount
	AuthorizationURL string
	Position         eventstore.Position
}

// gateways returns the environment's gateways (test ones on test unless
// configured otherwise; none on live unless configured).
func (s *Service) gateways(env domain.Environment) gateway.Set {
	if set, ok := s.Gateways[env]; ok {
		return set
	}
	return gateway.Set{}
}

// cryptoConfigured reports whether crypto payouts are set up for env.
func (s *Service) cryptoConfigured(env domain.Environment) bool {
	return ChainWatched(env) && s.CryptoMaster[env] != "" && s.gateways(env).Payouts != nil
}

// ChainWatched reports whether something watches env's chain, crediting
// deposits to the master address and sending withdrawals: on test the
// built-in gateways stand in for it. No chain adapter exists for live, so
// live crypto refuses whatever address is configured: no route may promise
// a movement of money that nothing performs.
func ChainWatched(env domain.Environment) bool { return env == domain.Test }

// CreateIntent stages a deposit, withdrawal or wallet transfer for the
// acting customer. Nothing moves until Verify.
func (s *Service) CreateIntent(ctx context.Context, a Actor, customerID string, perms customer.Permissions, in IntentRequest) (IntentResult, error) {
	var out IntentResult
	if err := ledger.ValidReference(in.Reference); err != nil {
		return out, err
	}
	set := s.gateways(a.Environment)
	switch in.Type {
	case ledger.Deposit:
		if set.Collection == nil && set.Charges == nil {
			return out, ErrPaymentsNotConfigured
		}
		if set.Charges == nil {
			if err := checkTestDeposit(set.Collection, in.Amount); err != nil {
				return out, err
			}
		}
	case ledger.Withdrawal, ledger.WalletTransfer:
		if !perms.CanWithdraw {
			return out, ErrAccessDenied
		}
	case ledger.EscrowPayment:
		if !perms.CanBuy {
			return out, ErrAccessDenied
		}
		if err := checkEscrowIDs(in.EscrowIDs); err != nil {
			return out, err
		}
		if in.Gateway != "" {
			if !ValidChargeGateway(in.Gateway) {
				return out, domain.Invalidf("gateway must be one of wallet, card, bank, ussd")
			}
			if set.Charges == nil {
				return out, ErrPaymentsNotConfigured
			}
		}
	}
	if in.Type == ledger.Withdrawal {
		if err := s.checkPayoutDestination(ctx, a.Environment, &in); err != nil {
			return out, err
		}
	}
	id := s.newRecordID()
	stream := payment.StreamID(a.MerchantID, a.Environment, in.Reference)
	// The collection gateway is asked once per new deposit, outside the
	// decision (which may run again): a real gateway may open an account
	// per call. A repeat answers with the instructions it stored.
	var instructions *payment.TestAccount
	var depositAccount *payment.BankAccount
	var charge *payment.ChargeStart
	viaProvider := set.Charges != nil && (in.Type == ledger.Deposit || in.Type == ledger.EscrowPayment && in.Gateway != "")
	if in.Type == ledger.Deposit || viaProvider {
		p, err := Peek(ctx, s.Engine, PaymentKind, stream)
		if err != nil {
			return out, err
		}
		switch {
		case p.Exists():
			// A repeat: answered below with what the intent stored.
		case viaProvider:
			c, _, err := Load(ctx, s.Engine, CustomerKind, customerID)
			if err != nil {
				return out, err
			}
			if c.MerchantID != a.MerchantID || c.Environment != a.Environment {
				return out, domain.Errorf(domain.NotFound, "Customer not found")
			}
			if in.Type == ledger.Deposit {
				if depositAccount, err = s.DepositAccount(ctx, a, c); err != nil {
					return out, err
				}
			} else if charge, err = s.startCharge(ctx, a.Environment, set.Charges, c, id, in); err != nil {
				return out, err
			}
		default:
			if instructions, err = set.Collection.Instructions(ctx,
				ledger.Record{MerchantID: a.MerchantID, Reference: in.Reference, Amount: in.Amount}); err != nil {
				return out, err
			}
		}
	}
	res, err := s.Engine.Do(ctx, a.meta(), func(tx *Tx) error {
		m, err := ReadLatest(tx, MerchantKind, a.MerchantID) // fees: an operator's change counts at once
		if err != nil {
			return err
		}
		if _, err := loadOwnCustomer(tx, a, customerID, domain.Errorf(domain.NotFound, "Customer not found")); err != nil {
			return err
		}
		intent := payment.Intent{ID: id, Reference: in.Reference, Type: in.Type, Amount: in.Amount, CustomerID: customerID,
			MerchantID: a.MerchantID, Environment: a.Environment, Narration: in.Narration,
			Withdrawal: in.Withdrawal, Blockchain: in.Blockchain, At: s.Engine.Now()}
		switch {
		case in.Withdrawal != nil:
			intent.Fee = money.Amount(m.Fees.BankWithdrawalFee)
		case in.Blockchain != nil:
			intent.Fee = money.Amount(m.Fees.CryptoWithdrawalFee)
			wl, err := Read(tx, WhitelistKind, customerID)
			if err != nil {
				return err
			}
			if !wl.Has(in.Blockchain.ToAddress) {
				return domain.Invalidf("Address is not whitelisted")
			}
			if !s.cryptoConfigured(a.Environment) {
				return ErrCryptoNotConfigured
			}
		case in.Wallet != nil:
			to, err := s.findReceiver(tx, a, m.Country, in.Wallet.Phone)
			if err != nil {
				return err
			}
			intent.Wallet = &ledger.WalletDetails{Phone: to.Phone, Narration: in.Wallet.Narration, CustomerID: to.ID,
				CustomerName: strings.TrimSpace(to.Firstname + " " + to.Lastname)}
		}
		intent.TestAccount, intent.DepositAccount = instructions, depositAccount
		p, err := Read(tx, PaymentKind, stream)
		if err != nil {
			return err
		}
		var ev *payment.IntentCreated
		if in.Type == ledger.EscrowPayment {
			ev, err = s.stageEscrowIntent(tx, a, customerID, EscrowPayment{Reference: in.Reference, Amount: in.Amount, EscrowIDs: in.EscrowIDs}, p, id)
			if ev != nil {
				ev.Charge = charge
			}
		} else {
			ev, err = payment.Stage(p, intent)
		}
		if err != nil {
			return err
		}
		if ev == nil { // the same request again: answer with the intent as it stands
			out.Record, out.TestAccount, out.DepositAccount, out.AuthorizationURL = p.Record, p.TestAccount, p.DepositAccount, p.AuthorizationURL
			return ErrNothingToDo
		}
		if ev.Record.Type == ledger.Deposit && ev.DepositAccount != nil {
			// The deposit waits for a transfer of its amount into the
			// account; the account's stream is where the transfer finds it.
			acct, err := Read(tx, DepositAccountKind, customerID)
			if err != nil {
				return err
			}
			awaited, err := payment.Await(acct, payment.AwaitedDeposit{Reference: ev.Record.Reference,
				Amount: ev.Record.Amount, At: ev.Record.CreatedAt}, s.Engine.Now())
			if err != nil {
				return err
			}
			Record(tx, DepositAccountKind, customerID, awaited...)
		}
		if ev.Charge != nil {
			// Linked before the payer can pay, so the provider's event
			// about the charge finds the payment.
			chargeID := payment.ChargeID(a.Environment, ev.Charge.Reference)
			if _, err := Read(tx, ChargeKind, chargeID); err != nil {
				return err
			}
			Record(tx, ChargeKind, chargeID, payment.ChargeStarted{MerchantID: a.MerchantID, CustomerID: customerID, Reference: ev.Record.Reference})
		}
		if in.Type == ledger.Withdrawal || in.Type == ledger.WalletTransfer {
			// Refuse early what verify would refuse; verify checks again
			// atomically with the debit.
			w, err := Read(tx, WalletKind, customerID)
			if err != nil {
				return err
			}
			if w.Main < ev.Record.Amount+ev.Record.Fee {
				return wallet.ErrInsufficient
			}
		}
		Record(tx, PaymentKind, stream, *ev)
		out.Record, out.TestAccount, out.DepositAccount = ev.Record, ev.TestAccount, ev.DepositAccount
		if ev.Charge != nil {
			out.AuthorizationURL = ev.Charge.AuthorizationURL
		}
		return nil
	})
	out.Position = res.Position
	return out, err
}

// checkPayoutDestination validates a withdrawal's destination (the checks
// that need no stored state) and fills the bank's name and the resolved
// account name: before anything is staged or debited, an account the bank
// does not know is refused. Where a provider resolves accounts, the name
// is always the bank's, whatever the client sent; on the built-in test
// gateways a blank name is the test bank's invented one.
func (s *Service) checkPayoutDestination(ctx context.Context, env domain.Environment, in *IntentRequest) error {
	switch {
	case in.Withdrawal != nil && in.Blockchain != nil, in.Withdrawal == nil && in.Blockchain == nil:
		return domain.Invalidf("A withdrawal needs exactly one of withdrawalDetails or blockchainDetails")
	case in.Withdrawal != nil:
		w := in.Withdrawal
		if s.gateways(env).Payouts == nil {
			return ErrPaymentsNotConfigured
		}
		bank, ok := reference.FindBank(w.BankCode)
		if !ok {
			return domain.Invalidf("bankCode is not a supported bank")
		}
		name, err := s.ResolveAccount(ctx, env, w.BankCode, w.AccountNumber)
		if err != nil {
			return err
		}
		w.BankName = bank.Name
		if s.gateways(env).Accounts != nil || strings.TrimSpace(w.AccountName) == "" {
			w.AccountName = name
		}
		if in.Narration == "" {
			in.Narration = w.Narration
		}
	default:
		b := in.Blockchain
		if !whitelist.ValidAddress(b.ToAddress) {
			return domain.Invalidf("toAddress must be 0x followed by 40 hexadecimal characters")
		}
		if b.Network == "" {
			b.Network = "BSC"
		}
		if b.Network != "BSC" {
			return domain.Invalidf("network must be BSC")
		}
	}
	return nil
}

// findReceiver resolves a transfer's receiver by phone in any spelling,
// among the merchant's customers of the environment.
func (s *Service) findReceiver(tx *Tx, a Actor, merchantCountry, phone string) (customer.State, error) {
	pref, ok := reference.FindCountry(merchantCountry)
	if !ok {
		pref = reference.Countries[0]
	}
	for _, p := range reference.PhoneCandidates(pref, phone) {
		name, err := s.phoneKey(tx, a, p)
		if err != nil {
			return customer.State{}, err
		}
		r, err := Read(tx, ReservationKind, name)
		if err != nil {
			return customer.State{}, err
		}
		if r.Holder == "" {
			continue
		}
		c, err := loadOwnCustomer(tx, a, r.Holder, domain.Invalidf("No customer found with the provided phone"))
		if err != nil {
			return c, err
		}
		if c.Blocked {
			return c, ErrReceiverBlocked
		}
		return c, nil
	}
	return customer.State{}, domain.Invalidf("No customer found with the provided phone")
}

// Intent returns the acting customer's intent named by reference.
// The cached intent is used when it names the customer's intent: a cache
// can only be behind, and every step decided from it is an append whose
// expected revision catches that. Only a refusal costs a fresh read.
func (s *Service) Intent(ctx context.Context, a Actor, customerID, ref string) (payment.State, error) {
	id := payment.StreamID(a.MerchantID, a.Environment, ref)
	mine := func(st payment.State) bool { return st.Exists() && st.Record.CustomerID == customerID }
	st, err := Peek(ctx, s.Engine, PaymentKind, id)
	if err != nil || mine(st) {
		return st, err
	}
	if st, _, err = Load(ctx, s.Engine, PaymentKind, id); err != nil {
		return st, err
	}
	if !mine(st) {
		return st, payment.ErrNotFound
	}
	return st, nil
}
