package escrow

import (
	"math/bits"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/ledger"
	"github.com/escrowd/escrowd/domain/money"
)

// A vault is an escrow (settlementType VAULT) of pooled stakes: two or more
// of the merchant's customers each lock a stake at creation, and the
// merchant later names a winner who takes the pot minus the platform fee,
// or cancels and returns each stake minus its share of the fee. It has no
// payment step and no dispute.

// ParticipantStatus is where a vault participant's stake is.
type ParticipantStatus string

const (
	ParticipantStaked   ParticipantStatus = "STAKED"
	ParticipantReleased ParticipantStatus = "RELEASED"
	ParticipantRefunded ParticipantStatus = "REFUNDED"
)

// Participant is one customer's stake in a vault.
type Participant struct {
	CustomerID string            `json:"customerId"`
	Amount     money.Amount      `json:"amount"`
	Status     ParticipantStatus `json:"status"`
	StakedAt   time.Time         `json:"stakedAt"`
	SettledAt  *time.Time        `json:"settledAt,omitempty"`
}

// Vault rules and messages.
var (
	ErrVaultParticipants = domain.Invalidf("A vault needs at least 2 unique participants")
	ErrVaultPot          = domain.Invalidf("Vault pot must be at least 1000")
	ErrVaultPotTooLarge  = domain.Invalidf("Vault pot must be at most %d", money.Max.Kobo()/100)
	ErrVaultTooMany      = domain.Invalidf("A vault allows at most %d participants", MaxVaultParticipants)
	ErrWinnerRequired    = domain.Invalidf("winnerId is required")
	ErrWinnerNotIn       = domain.Invalidf("Winner must be a vault participant")
	MinVaultParticipants = 2
	// MaxVaultParticipants: one append locks every participant's wallet,
	// and the vault's creation and settlement each record a stake or a
	// payout, postings and a record per participant in one event, which
	// must fit domain.MaxEventBytes.
	MaxVaultParticipants = 20
	MinVaultPot          = money.Naira(1000)
)

// ErrInsufficientStake is a participant whose main balance cannot cover
// the stake.
func ErrInsufficientStake(customerID string) error {
	return domain.Invalidf("Insufficient balance for participant %s", customerID)
}

// Stake is one participant of a create request.
type Stake struct {
	CustomerID string
	Amount     money.Amount
}

// VaultDraft is a vault create request after decoding.
type VaultDraft struct {
	Purpose      string
	Description  string
	CategoryID   string
	Participants []Stake
}

// Check validates the draft on its own (no balances): the fields, at
// least 2 unique participants, no customer twice, a pot of at least 1000.
func (d VaultDraft) Check() error {
	purpose := strings.TrimSpace(d.Purpose)
	switch {
	case purpose == "":
		return domain.Invalidf("purpose is required")
	case utf8.RuneCountInString(purpose) > maxPurpose:
		return domain.Invalidf("purpose must be at most %d characters", maxPurpose)
	case utf8.RuneCountInString(d.Description) > maxDescr:
		return domain.Invalidf("description must be at most %d characters", maxDescr)
	case len(d.Participants) > MaxVaultParticipants:
		return ErrVaultTooMany
	}
	seen := map[string]bool{}
	repeat := -1 // the first participant naming a customer named before
	var pot money.Amount
	for i, p := range d.Participants {
		switch {
		case strings.TrimSpace(p.CustomerID) == "":
			return domain.Invalidf("participants[%d].customerId is required", i)
		case p.Amount < money.Naira(1) || p.Amount%100 != 0 || p.Amount > money.Max:
			return domain.Invalidf("participants[%d].amount must be a positive integer", i)
		}
		if seen[p.CustomerID] && repeat < 0 {
			repeat = i
		}
		seen[p.CustomerID] = true
		pot += p.Amount
	}
	switch {
	case len(seen) < MinVaultParticipants:
		return ErrVaultParticipants
	case repeat >= 0:
		return domain.Invalidf("participants[%d].customerId repeats a participant", repeat)
	case pot < MinVaultPot:
		return ErrVaultPot
	case pot > money.Max:
		return ErrVaultPotTooLarge
	}
	return nil
}

// VaultFee is the platform fee of a vault's pot: bps of it, rounded
// half-up to a whole naira, as the escrow fee is.
func VaultFee(pot money.Amount, bps int64) money.Amount { return Fee(pot, bps) }

// Events of a vault.
type (
	// VaultCreated creates a vault already funded: every stake moves from
	// its owner's main balance to their escrow balance in this event.
	// FeeTerms are the merchant's vault rates, frozen with the fee.
	VaultCreated struct {
		ID           string             `json:"id"`
		PaymentToken string             `json:"paymentToken"`
		MerchantID   string             `json:"merchantId"`
		Environment  domain.Environment `json:"environment"`
		Terms        Terms              `json:"terms"` // Amount is the pot
		FeeTerms     FeeTerms           `json:"feeTerms"`
		Fee          money.Amount       `json:"fee"`
		Participants []Participant      `json:"participants"`
		Movement     ledger.Movement    `json:"movement"`
		Records      []ledger.Record    `json:"records"`
		At           time.Time          `json:"at"`
	}
	// VaultSettled settles a vault once: COMPLETED pays the pot less the
	// fee to WinnerID, REFUNDED returns each stake less its fee share.
	VaultSettled struct {
		Status     Status          `json:"status"`
		WinnerID   string          `json:"winnerId,omitempty"`
		RefundedBy string          `json:"refundedBy,omitempty"` // the merchant, on a cancel
		Movement   ledger.Movement `json:"movement"`
		Records    []ledger.Record `json:"records"`
		At         time.Time       `json:"at"`
	}
)

func (VaultCreated) EventType() string { return "escrow.vault_created" }
func (VaultSettled) EventType() string { return "escrow.vault_settled" }

func (e VaultCreated) Ledger() ledger.Effect {
	return ledger.Effect{Movement: &e.Movement, Records: e.Records}
}

func (e VaultSettled) Ledger() ledger.Effect {
	return ledger.Effect{Movement: &e.Movement, Records: e.Records}
}

// CreateVault decides a new vault of merchantID. available is each
// participant's main balance as read in the same command (the append
// proves it current); every stake must be covered, or nothing is created.
func CreateVault(id, token, merchantID string, env domain.Environment, fees FeeTerms, d VaultDraft,
	available map[string]money.Amount, at time.Time) (VaultCreated, error) {
	if err := d.Check(); err != nil {
		return VaultCreated{}, err
	}
	ev := VaultCreated{ID: id, PaymentToken: token, MerchantID: merchantID, Environment: env, FeeTerms: fees,
		Terms: Terms{Purpose: strings.TrimSpace(d.Purpose), Description: d.Description, CategoryID: d.CategoryID}, At: at}
	ev.Movement = ledger.Movement{MerchantID: merchantID, Environment: env}
	for _, p := range d.Participants {
		if available[p.CustomerID] < p.Amount {
			return VaultCreated{}, ErrInsufficientStake(p.CustomerID)
		}
		ev.Terms.Amount += p.Amount
		ev.Participants = append(ev.Participants, Participant{CustomerID: p.CustomerID, Amount: p.Amount,
			Status: ParticipantStaked, StakedAt: at})
		ev.Movement.Move(ledger.CustomerMain(p.CustomerID), ledger.CustomerEscrow(p.CustomerID), p.Amount)
	}
	ev.Fee = VaultFee(ev.Terms.Amount, fees.EscrowFeeBps)
	// The stake records are the participants' debits; the vault as it
	// stands names them (the same id and token as the escrow's other
	// records).
	v := applyCreated(ev)
	for _, p := range v.Participants {
		r := v.record("stake-"+p.CustomerID, ledger.VaultStake, p.CustomerID, p.Amount, 0, at)
		r.CreditType = ledger.Debit
		ev.Records = append(ev.Records, r)
	}
	return ev, nil
}

// DeclareWinner decides the merchant's winner: the pot less the fee goes
// to winnerID's main balance, the fee is collected, every participant is
// RELEASED and the vault closes COMPLETED.
func DeclareWinner(s State, winnerID string, at time.Time) (VaultSettled, error) {
	if !s.Exists() {
		return VaultSettled{}, ErrNotFound
	}
	if err := s.may(ActDeclareWinner); err != nil {
		return VaultSettled{}, err
	}
	winnerID = strings.TrimSpace(winnerID)
	if winnerID == "" {
		return VaultSettled{}, ErrWinnerRequired
	}
	if !s.isParticipant(winnerID) {
		return VaultSettled{}, ErrWinnerNotIn
	}
	st := s.vaultSettlement(Completed, []Payout{{CustomerID: winnerID, Amount: s.Terms.Amount - s.Fee, Fee: s.Fee,
		Type: ledger.VaultPayout, Key: "payout"}})
	m, records, err := st.Entry(s, at)
	return VaultSettled{Status: Completed, WinnerID: winnerID, Movement: m, Records: records, At: at}, err
}

// CancelVault decides the merchant's cancellation: each stake goes back
// to its owner less the owner's share of the fee (the fee is collected
// either way), every participant is REFUNDED and the vault closes
// REFUNDED.
func CancelVault(s State, merchantID string, at time.Time) (VaultSettled, error) {
	if !s.Exists() {
		return VaultSettled{}, ErrNotFound
	}
	if err := s.may(ActCancelVault); err != nil {
		return VaultSettled{}, err
	}
	stakes := make([]money.Amount, len(s.Participants))
	for i, p := range s.Participants {
		stakes[i] = p.Amount
	}
	shares := FeeSharesByStake(s.Fee, stakes)
	payouts := make([]Payout, len(s.Participants))
	for i, p := range s.Participants {
		payouts[i] = Payout{CustomerID: p.CustomerID, Amount: p.Amount - shares[i], Fee: shares[i], Type: ledger.VaultRefund,
			Key: "refund-" + p.CustomerID}
	}
	m, records, err := s.vaultSettlement(Refunded, payouts).Entry(s, at)
	return VaultSettled{Status: Refunded, RefundedBy: merchantID, Movement: m, Records: records, At: at}, err
}

// vaultSettlement releases every stake: Holds are the stakes, the fee and
// commission are the vault's, frozen at creation.
func (s State) vaultSettlement(status Status, payouts []Payout) Settlement {
	holds := make([]Hold, len(s.Participants))
	for i, p := range s.Participants {
		holds[i] = Hold{CustomerID: p.CustomerID, Amount: p.Amount}
	}
	fee, commission := s.feeLegs()
	return Settlement{Status: status, Holds: holds, Payouts: payouts, Fee: fee, Commission: commission}
}

// FeeSharesByStake divides fee among stakes pro rata, to the kobo, by the
// largest remainder: each share is fee × stake / pot rounded down, and the
// kobo left over go one each to the largest remainders (the earlier stake
// on a tie), so the shares sum exactly to the fee.
func FeeSharesByStake(fee money.Amount, stakes []money.Amount) []money.Amount {
	var pot money.Amount
	for _, a := range stakes {
		pot += a
	}
	shares := make([]money.Amount, len(stakes))
	if pot <= 0 || fee <= 0 {
		return shares
	}
	rems := make([]uint64, len(stakes))
	left := fee
	for i, a := range stakes {
		// fee × stake can pass int64; fee <= pot keeps the quotient in range.
		hi, lo := bits.Mul64(uint64(fee), uint64(a))
		q, r := bits.Div64(hi, lo, uint64(pot))
		shares[i], rems[i] = money.Amount(q), r
		left -= shares[i]
	}
	order := make([]int, len(stakes))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(x, y int) bool { return rems[order[x]] > rems[order[y]] })
	for _, i := range order[:left] {
		shares[i]++
	}
	return shares
}

func (s State) isParticipant(customerID string) bool {
	for _, p := range s.Participants {
		if p.CustomerID == customerID {
			return true
		}
	}
	return false
}

// applyCreated is the vault a VaultCreated event creates: OPENED / ONGOING
// from the start (there is no payment step).
func applyCreated(e VaultCreated) State {
	return State{ID: e.ID, PaymentToken: e.PaymentToken, MerchantID: e.MerchantID, Environment: e.Environment,
		Terms: e.Terms, FeeTerms: e.FeeTerms, Fee: e.Fee, ImageURLs: []string{}, TotalQuantity: 1, Channel: "api",
		Status: Ongoing, Logs: []string{string(Ongoing)}, CreatedAt: e.At, UpdatedAt: e.At,
		SettlementType: VaultSettlement, Participants: append([]Participant{}, e.Participants...)}
}

// applyVault folds the vault events.
func applyVault(s State, ev domain.Event) (State, bool) {
	switch e := ev.(type) {
	case VaultCreated:
		return applyCreated(e), true
	case VaultSettled:
		status := ParticipantReleased
		if e.Status == Refunded {
			status = ParticipantRefunded
			s.RefundedBy = e.RefundedBy
		}
		ps := append([]Participant{}, s.Participants...)
		for i := range ps {
			t := e.At
			ps[i].Status, ps[i].SettledAt = status, &t
		}
		s.Participants, s.WinnerID = ps, e.WinnerID
		return s.closed(e.Status, e.At), true
	}
	return s, false
}
