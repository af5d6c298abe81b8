package escrow

import (
	"time"

	"github.com/escrowd/escrowd/domain/money"
)

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
