package view

import (
	"strconv"
	"time"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/escrow"
	"github.com/escrowd/escrowd/domain/money"
)

// Escrow is the spec's Escrow object.
type Escrow struct {
	ID                      string             `json:"id"`
	Amount                  money.Amount       `json:"amount"`
	Purpose                 string             `json:"purpose"`
	Description             string             `json:"description"`
	WhoPays                 escrow.WhoPays     `json:"whoPays"`
	ImageURL                []string           `json:"imageUrl"`
	Fee                     money.Amount       `json:"fee"`
	AdditionalFee           money.Amount       `json:"additionalFee"`
	AdditionalFeeRefundable bool               `json:"additionalFeeRefundable"`
	PaymentToken            string             `json:"paymentToken"`
	PaidAt                  *string            `json:"paidAt"`
	Status                  escrow.Status      `json:"status"`
	State                   escrow.Phase       `json:"state"`
	Channel                 string             `json:"channel"`
	IsSeller                bool               `json:"isSeller"`
	Dispute                 []Dispute          `json:"dispute"`
	Category                *Category          `json:"category"`
	CategoryID              *string            `json:"categoryId"`
	CompletedAt             *time.Time         `json:"completedAt"`
	MaxDelivery             int                `json:"maxDelivery"`
	DeliveryTimeline        string             `json:"deliveryTimeline"`
	TotalQuantity           int                `json:"totalQuantity"`
	SettlementType          string             `json:"settlementType"`
	Milestones              []Milestone        `json:"milestones"`
	Participants            []Participant      `json:"participants"`
	WinnerID                *string            `json:"winnerId"`
	CreatedAt               time.Time          `json:"createdAt"`
	UpdatedAt               time.Time          `json:"updatedAt"`
	SellerID                *string            `json:"sellerId"`
	BuyerID                 *string            `json:"buyerId"`
	Logs                    []string           `json:"logs"`
	ApprovedClaimBy         *string            `json:"approvedClaimBy"`
	RefundedBy              *string            `json:"refundedBy"`
	PaymentID               *string            `json:"paymentId"`
	DeliveryDetails         any                `json:"deliveryDetails"`
	MerchantID              string             `json:"merchantId"`
	Environment             domain.Environment `json:"environment"`
	IsMerchant              bool               `json:"isMerchant"`
	ParentID                *string            `json:"parentId,omitempty"`
	Split                   *Split             `json:"split,omitempty"`
	// RefundedAmount is what the merchant's partial refunds returned to
	// the buyer while the escrow was open.
	RefundedAmount money.Amount `json:"refundedAmount"`
	// AutoRelease: the service releases the escrow when its delivery
	// window elapses; NextDeadline is when the service next acts on it by
	// itself (null: never).
	AutoRelease  bool      `json:"autoRelease"`
	NextDeadline *Deadline `json:"nextDeadline"`
}

// Deadline is when the service acts on an escrow by itself, and what it
// does then: auto_release or unpaid_expiry.
type Deadline struct {
	Type string    `json:"type"`
	At   time.Time `json:"at"`
}

// Dispute is the spec's dispute entry.
type Dispute struct {
	UserID    string  `json:"userId"`
	Message   string  `json:"message"`
	ProofURL  string  `json:"proofUrl"`
	CreatedAt string  `json:"createdAt"` // Unix seconds
	Name      string  `json:"name"`
	Profile   *string `json:"profile"`
	Type      string  `json:"type"`
}

// Split is the spec's Split object.
type Split struct {
	SellerAmount money.Amount `json:"sellerAmount"`
	BuyerAmount  money.Amount `json:"buyerAmount"`
	Pool         money.Amount `json:"pool"`
	ResolvedAt   time.Time    `json:"resolvedAt"`
}

// Milestone is the spec's Milestone object.
type Milestone struct {
	ID          string                 `json:"id"`
	Title       string                 `json:"title"`
	Description string                 `json:"description"`
	Amount      money.Amount           `json:"amount"`
	DueDate     *time.Time             `json:"dueDate"`
	CustomerID  *string                `json:"customerId"`
	Status      escrow.MilestoneStatus `json:"status"`
	ReleasedAt  *time.Time             `json:"releasedAt"`
}

// Participant is the spec's VaultParticipant.
type Participant struct {
	CustomerID string                   `json:"customerId"`
	Amount     money.Amount             `json:"amount"`
	Status     escrow.ParticipantStatus `json:"status"`
	StakedAt   string                   `json:"stakedAt"`  // Unix seconds
	SettledAt  *string                  `json:"settledAt"` // Unix seconds
}

func unixString(t time.Time) string { return strconv.FormatInt(t.Unix(), 10) }

func nonEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// RenderEscrow is the escrow as the API and webhooks show it. viewerID is
// the customer looking ("" for the merchant), for isSeller.
func RenderEscrow(e escrow.State, cat *Category, viewerID string) Escrow {
	v := Escrow{ID: e.ID, Amount: e.Terms.Amount, Purpose: e.Terms.Purpose, Description: e.Terms.Description,
		WhoPays: e.Terms.WhoPays, ImageURL: append([]string{}, e.ImageURLs...), Fee: e.Fee, AdditionalFee: e.AdditionalFee,
		AdditionalFeeRefundable: e.AdditionalFeeRefundable, PaymentToken: e.PaymentToken, Status: e.Status, State: e.Status.Phase(),
		Channel: e.Channel, IsSeller: e.Type() != escrow.VaultSettlement && e.SellerID == viewerID, Category: cat, CategoryID: nonEmpty(e.Terms.CategoryID),
		MaxDelivery: e.Terms.MaxDelivery, DeliveryTimeline: e.Terms.DeliveryTimeline, TotalQuantity: e.TotalQuantity,
		SettlementType: string(e.Type()), Milestones: []Milestone{}, CreatedAt: e.CreatedAt, UpdatedAt: e.UpdatedAt,
		SellerID: nonEmpty(e.SellerID), BuyerID: nonEmpty(e.BuyerID), Logs: append([]string{}, e.Logs...),
		PaymentID: nonEmpty(e.PaymentID), MerchantID: e.MerchantID, Environment: e.Environment,
		IsMerchant: e.IsMerchantSale(), ParentID: nonEmpty(e.ParentID)}
	if !e.PaidAt.IsZero() {
		v.PaidAt = nonEmpty(unixString(e.PaidAt))
	}
	// A dispute's messages and evidence are the parties' and the
	// merchant's ("" views as the merchant); any other customer of the
	// merchant who sees the escrow (a listing, a payment link) sees none.
	disputants := viewerID == "" || viewerID == e.BuyerID || viewerID == e.SellerID
	for _, d := range e.Disputes {
		if !disputants {
			break
		}
		v.Dispute = append(v.Dispute, Dispute{UserID: d.UserID, Message: d.Message, ProofURL: d.ProofURL,
			CreatedAt: unixString(d.CreatedAt), Name: d.Name, Type: d.Type})
	}
	if sp := e.Split; sp != nil {
		v.Split = &Split{SellerAmount: sp.SellerAmount, BuyerAmount: sp.BuyerAmount, Pool: sp.Pool, ResolvedAt: sp.ResolvedAt}
	}
	v.RefundedBy, v.RefundedAmount = nonEmpty(e.RefundedBy), e.PartiallyRefunded
	for _, m := range e.Milestones {
		v.Milestones = append(v.Milestones, Milestone{ID: m.ID, Title: m.Title, Description: m.Description, Amount: m.Amount,
			DueDate: m.DueDate, CustomerID: nonEmpty(m.CustomerID), Status: m.Status, ReleasedAt: m.ReleasedAt})
	}
	if e.Type() == escrow.VaultSettlement {
		v.Participants = []Participant{}
		for _, p := range e.Participants {
			pv := Participant{CustomerID: p.CustomerID, Amount: p.Amount, Status: p.Status, StakedAt: unixString(p.StakedAt)}
			if p.SettledAt != nil {
				pv.SettledAt = nonEmpty(unixString(*p.SettledAt))
			}
			v.Participants = append(v.Participants, pv)
		}
		v.WinnerID = nonEmpty(e.WinnerID)
	}
	if !e.CompletedAt.IsZero() {
		t := e.CompletedAt
		v.CompletedAt = &t
	}
	if e.Status == escrow.Claimed {
		v.ApprovedClaimBy = nonEmpty(e.SellerID)
	}
	v.AutoRelease = e.Terms.AutoRelease && e.Type() == escrow.StandardSettlement
	if kind, at, ok := e.NextDeadline(); ok {
		v.NextDeadline = &Deadline{Type: string(kind), At: at}
	}
	return v
}
