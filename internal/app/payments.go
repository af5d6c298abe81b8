package app

import (
	"context"
	"errors"
	"strings"
	"time"

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
}

// IntentResult is a staged intent.
type IntentResult struct {
	Record      ledger.Record
	TestAccount *payment.TestAccount
	Position    eventstore.Position
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
	return s.CryptoMaster[env] != "" && s.gateways(env).Payouts != nil
}

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
		if set.Collection == nil {
			return out, ErrPaymentsNotConfigured
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
	}
	if in.Type == ledger.Withdrawal {
		if err := s.checkPayoutDestination(a.Environment, &in); err != nil {
			return out, err
		}
	}
	id := s.newID()
	stream := payment.StreamID(a.MerchantID, a.Environment, in.Reference)
	// The collection gateway is asked once per new deposit, outside the
	// decision (which may run again): a real gateway may open an account
	// per call. A repeat answers with the instructions it stored.
	var instructions *payment.TestAccount
	if in.Type == ledger.Deposit {
		p, err := Peek(ctx, s.Engine, PaymentKind, stream)
		if err != nil {
			return out, err
		}
		if !p.Exists() {
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
		intent.TestAccount = instructions
		p, err := Read(tx, PaymentKind, stream)
		if err != nil {
			return err
		}
		var ev *payment.IntentCreated
		if in.Type == ledger.EscrowPayment {
			ev, err = s.stageEscrowIntent(tx, a, customerID, EscrowPayment{Reference: in.Reference, Amount: in.Amount, EscrowIDs: in.EscrowIDs}, p, id)
		} else {
			ev, err = payment.Stage(p, intent)
		}
		if err != nil {
			return err
		}
		if ev == nil { // the same request again: answer with the intent as it stands
			out.Record, out.TestAccount = p.Record, p.TestAccount
			return ErrNothingToDo
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
		out.Record, out.TestAccount = ev.Record, ev.TestAccount
		return nil
	})
	out.Position = res.Position
	return out, err
}

// checkPayoutDestination validates a withdrawal's destination (the checks
// that need no stored state) and fills the bank's name and the resolved
// account name.
func (s *Service) checkPayoutDestination(env domain.Environment, in *IntentRequest) error {
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
		if !reference.ValidNUBAN(w.BankCode, w.AccountNumber) {
			return domain.Invalidf("Could not resolve account name")
		}
		w.BankName = bank.Name
		if strings.TrimSpace(w.AccountName) == "" {
			w.AccountName = reference.TestAccountName(w.BankCode, w.AccountNumber)
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
		r, err := Read(tx, ReservationKind, customer.PhoneKey(a.MerchantID, a.Environment, p))
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
			return c, domain.Invalidf("The recipient's account is disabled")
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

// Verify executes the acting customer's intent exactly once and returns its
// record: a deposit the gateway confirmed is credited, a transfer moves, a
// withdrawal is debited and paid out (or reversed when the payout fails).
// Verifying a settled intent returns the stored outcome; verifying a
// withdrawal interrupted after its debit resumes the payout.
func (s *Service) Verify(ctx context.Context, a Actor, customerID string, perms customer.Permissions, ref string) (ledger.Record, eventstore.Position, error) {
	st, err := s.Intent(ctx, a, customerID, ref)
	if err != nil {
		return ledger.Record{}, eventstore.Position{}, err
	}
	if st.Phase == payment.Done {
		return st.Record, eventstore.Position{}, nil
	}
	typ := st.Record.Type
	if (typ == ledger.Withdrawal || typ == ledger.WalletTransfer) && !perms.CanWithdraw {
		return ledger.Record{}, eventstore.Position{}, ErrAccessDenied
	}
	set := s.gateways(a.Environment)
	if typ == ledger.Withdrawal && set.Payouts == nil {
		// Refused before anything moves or the lease is taken: a debit
		// nobody can pay out, or a lease held without asking, helps no one.
		return ledger.Record{}, eventstore.Position{}, ErrPaymentsNotConfigured
	}
	stream := payment.StreamID(a.MerchantID, a.Environment, ref)
	holder := s.newID() // this verify, as a payout lease holder
	var pos eventstore.Position
	if st.Phase == payment.Staged && typ == ledger.EscrowPayment {
		if !perms.CanBuy {
			return ledger.Record{}, pos, ErrAccessDenied
		}
		res, err := s.Engine.Do(ctx, a.meta(), func(tx *Tx) error {
			p, err := Read(tx, PaymentKind, stream)
			if err != nil {
				return err
			}
			if p.Phase != payment.Staged {
				st = p
				return ErrNothingToDo
			}
			st, _, err = s.fundEscrows(tx, a, stream, p)
			return err
		})
		return st.Record, res.Position, err
	}
	if st.Phase == payment.Staged {
		var deposit payment.Outcome
		if typ == ledger.Deposit {
			if set.Collection == nil {
				return ledger.Record{}, pos, ErrPaymentsNotConfigured
			}
			if deposit, err = set.Collection.Confirm(ctx, st.Record); err != nil {
				return ledger.Record{}, pos, err
			}
		}
		receiverID := s.newID()
		res, err := s.advanceIntent(ctx, a, stream, &st, func(tx *Tx, p payment.State) (domain.Event, error) {
			if bc := p.Record.BlockchainDetails; bc != nil && p.Phase == payment.Staged {
				// The address may have been removed since staging; the append
				// proves it is still whitelisted when the money leaves.
				wl, err := Guard(tx, WhitelistKind, customerID)
				if err != nil {
					return nil, err
				}
				if !wl.Has(bc.ToAddress) {
					return nil, domain.Invalidf("Address is not whitelisted")
				}
			}
			ev, err := payment.Execute(p, deposit, receiverID, "WT-"+receiverID, s.Engine.Now())
			if started, ok := ev.(payment.PayoutStarted); ok {
				// The debit takes the payout lease with it.
				ev = started.Leased(holder, s.Engine.Now())
			}
			return ev, err
		})
		if err != nil {
			return ledger.Record{}, pos, err
		}
		pos = res.Position
	}
	p, err := s.payOut(ctx, a, stream, &st, holder, set.Payouts, nil)
	if p != (eventstore.Position{}) {
		pos = p
	}
	return st.Record, pos, err
}

// ResumePayout finishes a withdrawal found paying out whose verify was
// interrupted after the debit (or whose provider did not answer), as the
// PayoutResumer does for every such withdrawal: it takes the payout lease
// when nobody holds it, asks the provider and records the answer. It does
// nothing to an intent that is not paying out, and answers
// ErrPayoutInProgress while another holder's lease runs. agent names the
// background job in the events' metadata. settled says the withdrawal was
// paying out and is now over (paid out or reversed).
func (s *Service) ResumePayout(ctx context.Context, merchantID string, env domain.Environment, ref, agent string) (rec ledger.Record, settled bool, err error) {
	a := Actor{MerchantID: merchantID, Environment: env, Agent: agent}
	stream := payment.StreamID(merchantID, env, ref)
	st, _, err := Load(ctx, s.Engine, PaymentKind, stream)
	if err != nil || st.Phase != payment.PayingOut {
		return st.Record, false, err
	}
	set := s.gateways(env)
	if set.Payouts == nil {
		return st.Record, false, ErrPaymentsNotConfigured
	}
	// Verify resumes a payout only for a customer who may still withdraw
	// (auth refuses a blocked one, Verify one without the permission); the
	// resumer, acting without the customer, holds the money as they would.
	// It decides so in the append that takes the lease, which guards the
	// customer's stream: a block committed before it is seen, and one
	// racing it waits for it or makes it decide again.
	mayWithdraw := func(tx *Tx, p payment.State) error {
		c, err := Guard(tx, CustomerKind, p.Record.CustomerID)
		if err != nil {
			return err
		}
		if c.Blocked || !c.Permissions.CanWithdraw {
			return ErrPayoutHeld
		}
		return nil
	}
	_, err = s.payOut(ctx, a, stream, &st, s.newID(), set.Payouts, mayWithdraw)
	return st.Record, err == nil && st.Phase == payment.Done, err
}

// ErrPayoutHeld: the resumer leaves a withdrawal paying out whose customer
// is blocked or may no longer withdraw; it is resumed once they may.
var ErrPayoutHeld = errors.New("app: payout held: the customer is blocked or may not withdraw")

// payOut runs a withdrawal's payout step for holder, a verify or the
// resumer: st is the intent as read, and is left as it now stands. It
// takes the lease unless holder already has it (a verify that just
// debited), asks the provider within the lease's call deadline, and records
// the answer, or gives the lease up when there is none. mayTake, when
// set, is asked within the append that takes the lease, for a withdrawal
// still paying out; its error refuses the lease.
func (s *Service) payOut(ctx context.Context, a Actor, stream string, st *payment.State, holder string, payouts gateway.Payouts, mayTake func(*Tx, payment.State) error) (eventstore.Position, error) {
	var pos eventstore.Position
	if st.Phase == payment.PayingOut && st.LeaseHolder != holder {
		// Found paying out (an interrupted verify, or one still asking the
		// provider): take the lease, unless another verify holds it or has
		// finished the payout meanwhile (the append's expected revision
		// settles a race for it).
		res, err := s.advanceIntent(ctx, a, stream, st, func(tx *Tx, p payment.State) (domain.Event, error) {
			ev, err := payment.LeasePayout(p, holder, s.Engine.Now())
			if ev != nil && err == nil && mayTake != nil {
				err = mayTake(tx, p)
			}
			return ev, err
		})
		if err != nil {
			return pos, err
		}
		if res.Position != (eventstore.Position{}) {
			pos = res.Position
		}
	}
	if st.Phase == payment.PayingOut {
		// This verify holds the lease; its call ends by the lease's call
		// deadline, and is not made at all once that has passed. From here
		// the step belongs to the lease, not to the client's connection: a
		// client hanging up must neither cut the provider's call short nor
		// keep its answer from being recorded (a payout made but not
		// recorded would be asked for again once the lease ran out).
		ctx := context.WithoutCancel(ctx)
		out, err := payment.Outcome{}, context.DeadlineExceeded
		if left := st.PayoutCallDeadline().Sub(s.Engine.Now()); left > 0 {
			call, cancel := context.WithTimeout(ctx, left)
			out, err = payouts.Pay(call, st.Record)
			cancel()
		}
		ctx, cancel := context.WithTimeout(ctx, payoutRecordTimeout)
		defer cancel()
		if err != nil {
			// The debit stands and the payout is unknown (or not asked):
			// the intent stays pending, and the lease is given up so that
			// verifying again asks the provider again at once (were the
			// release lost, the lease would run out).
			if _, rerr := s.advanceIntent(ctx, a, stream, st, func(_ *Tx, p payment.State) (domain.Event, error) {
				return payment.ReleasePayout(p, holder, s.Engine.Now()), nil
			}); rerr != nil {
				return pos, errors.Join(ErrPayoutUnanswered, rerr)
			}
			return pos, ErrPayoutUnanswered
		}
		res, err := s.advanceIntent(ctx, a, stream, st, func(_ *Tx, p payment.State) (domain.Event, error) {
			return payment.FinishPayout(p, holder, out, s.Engine.Now()), nil
		})
		if err != nil {
			return pos, err
		}
		if res.Position != (eventstore.Position{}) {
			pos = res.Position
		}
		if st.Phase == payment.PayingOut && st.LeaseHolder != holder {
			// The lease ran out and another holder took it before this
			// answer was recorded: that one asks again and records.
			return pos, payment.ErrPayoutInProgress
		}
	}
	return pos, nil
}

// payoutRecordTimeout bounds recording a payout's answer (or giving its
// lease up) once the client's own context no longer does.
const payoutRecordTimeout = 15 * time.Second

// advanceIntent runs one step of an intent's life: decide returns the next
// event (nil when another request already took the step), whose money is
// posted to the wallets in the same append. st is left at the intent as it
// now stands.
func (s *Service) advanceIntent(ctx context.Context, a Actor, stream string, st *payment.State, decide func(*Tx, payment.State) (domain.Event, error)) (eventstore.AppendResult, error) {
	return s.Engine.Do(ctx, a.meta(), func(tx *Tx) error {
		p, err := Read(tx, PaymentKind, stream)
		if err != nil {
			return err
		}
		ev, err := decide(tx, p)
		if err != nil {
			return err
		}
		if ev == nil {
			*st = p
			return ErrNothingToDo
		}
		if err := recordEntry(s, tx, PaymentKind, stream, ev); err != nil {
			return err
		}
		*st = payment.Apply(p, ev)
		return nil
	})
}

// TopUp credits a test wallet (once a day per customer) as a settled
// deposit.
func (s *Service) TopUp(ctx context.Context, a Actor, customerID string, amount money.Amount) (ledger.Record, eventstore.Position, error) {
	res, err := s.TopUpWallet(ctx, a, customerID, amount)
	return res.Record, res.Position, err
}

// TopUpResult is a top-up's deposit record and the main balance right
// after it (api-decisions §7: top-up answers carry mainBalance).
type TopUpResult struct {
	Record      ledger.Record
	MainBalance money.Amount
	Position    eventstore.Position
}

// TopUpWallet is TopUp, also answering the balance the credit left: the
// wallet's state the append checked, plus the credit, so no later write
// can show in it.
func (s *Service) TopUpWallet(ctx context.Context, a Actor, customerID string, amount money.Amount) (TopUpResult, error) {
	if a.Environment != domain.Test {
		return TopUpResult{}, domain.Errorf(domain.Forbidden, "This route is only available on staging environment")
	}
	id := s.newID()
	ref := "TOPUP-" + id
	created, settled, err := payment.TopUp(payment.Intent{ID: id, Reference: ref, Amount: amount, CustomerID: customerID,
		MerchantID: a.MerchantID, Environment: a.Environment, At: s.Engine.Now()})
	if err != nil {
		return TopUpResult{}, err
	}
	stream := payment.StreamID(a.MerchantID, a.Environment, ref)
	var balance money.Amount
	res, err := s.Engine.Do(ctx, a.meta(), func(tx *Tx) error {
		if _, err := loadOwnCustomer(tx, a, customerID, domain.Errorf(domain.NotFound, "Customer not found")); err != nil {
			return err
		}
		// postEffect checks a top-up against the wallet it reads; this is
		// the same read (the tx's), at the revision the append expects.
		w, err := Read(tx, WalletKind, customerID)
		if err != nil {
			return err
		}
		if err := s.postEffect(tx, settled, true); err != nil {
			return err
		}
		balance = w.Main + amount
		Record(tx, PaymentKind, stream, created, settled)
		return nil
	})
	return TopUpResult{Record: settled.Records[0], MainBalance: balance, Position: res.Position}, err
}

// recordEntry records ev on aggregate id of kind k and, when ev is a ledger
// entry, posts its movement to the wallets it touches (postEffect): an
// event that moves money never goes into an append without its postings.
func recordEntry[S any](s *Service, tx *Tx, k Kind[S], id string, ev domain.Event) error {
	if entry, ok := ev.(ledger.Entry); ok {
		if err := s.postEffect(tx, entry, false); err != nil {
			return err
		}
	}
	Record(tx, k, id, ev)
	return nil
}

// refusedOnMovedWallet marks the attempt to be decided again when a
// wallet check (postEffect) refused a movement the decision allowed: the
// decision rested on a balance, or on an escrow holding it, that another
// command has moved since this one read it (a vault's settlement racing
// another; a participant's payment between two reads of their wallet).
// Only a decision on state read afresh may refuse.
func refusedOnMovedWallet(tx *Tx, err error) error {
	if errors.Is(err, wallet.ErrInsufficient) {
		tx.stale = true
	}
	return err
}

// postEffect mirrors an entry's movement into every customer wallet it
// touches, in the same append: a debit is checked against the wallet's
// revision-proven balance; a pure credit is appended unchecked, so payments
// into a popular wallet never conflict with each other.
func (s *Service) postEffect(tx *Tx, e ledger.Entry, topUp bool) error {
	eff := e.Ledger()
	if eff.Movement == nil {
		return nil
	}
	m := *eff.Movement
	if err := m.Validate(); err != nil {
		return err
	}
	p := wallet.Posting{TopUp: topUp, At: s.Engine.Now()}
	if len(eff.Records) > 0 {
		p.TransactionID, p.Reference = eff.Records[0].ID, eff.Records[0].Reference
	}
	d := m.Deltas()
	for _, cid := range m.Customers() {
		// A top-up is a credit with a rule (once a day) on the wallet's
		// state, so it is checked like a debit.
		credit := d[ledger.CustomerMain(cid)] >= 0 && d[ledger.CustomerEscrow(cid)] >= 0 && !topUp
		var w wallet.State
		if !credit {
			var err error
			if w, err = Read(tx, WalletKind, cid); err != nil {
				return err
			}
		}
		posted, err := wallet.Post(w, cid, m, postingOf(p, eff.Records, cid))
		if err != nil {
			return err
		}
		switch {
		case posted == nil:
		case credit:
			Append(tx, WalletKind, cid, *posted)
		default:
			Record(tx, WalletKind, cid, *posted)
		}
	}
	return nil
}

// postingOf is p for customerID's wallet: named after the customer's own
// record when the entry writes one (each participant's stake of a vault),
// else after the entry's first record.
func postingOf(p wallet.Posting, records []ledger.Record, customerID string) wallet.Posting {
	for _, r := range records {
		if r.CustomerID == customerID {
			p.TransactionID, p.Reference = r.ID, r.Reference
			break
		}
	}
	return p
}
