package projections

import (
	"strconv"
	"time"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/escrow"
	"github.com/escrowd/escrowd/domain/money"
)

// EscrowView is the spec's Escrow object.
type EscrowView struct {
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
	Dispute                 []any              `json:"dispute"`
	Category                *Category          `json:"category"`
	CategoryID              *string            `json:"categoryId"`
	CompletedAt             *time.Time         `json:"completedAt"`
	MaxDelivery             int                `json:"maxDelivery"`
	DeliveryTimeline        string             `json:"deliveryTimeline"`
	TotalQuantity           int                `json:"totalQuantity"`
	SettlementType          string             `json:"settlementType"`
	Milestones              []any              `json:"milestones"`
	Participants            []any              `json:"participants"`
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
}

func nonEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// RenderEscrow is the escrow as the API and webhooks show it. viewerID is
// the customer looking ("" for the merchant), for isSeller.
func RenderEscrow(e escrow.State, cat *Category, viewerID string) EscrowView {
	v := EscrowView{ID: e.ID, Amount: e.Terms.Amount, Purpose: e.Terms.Purpose, Description: e.Terms.Description,
		WhoPays: e.Terms.WhoPays, ImageURL: append([]string{}, e.ImageURLs...), Fee: e.Fee, AdditionalFee: e.AdditionalFee,
		AdditionalFeeRefundable: e.AdditionalFeeRefundable, PaymentToken: e.PaymentToken, Status: e.Status, State: e.Status.Phase(),
		Channel: e.Channel, IsSeller: e.SellerID == viewerID, Category: cat, CategoryID: nonEmpty(e.Terms.CategoryID),
		MaxDelivery: e.Terms.MaxDelivery, DeliveryTimeline: e.Terms.DeliveryTimeline, TotalQuantity: e.TotalQuantity,
		SettlementType: "STANDARD", Milestones: []any{}, CreatedAt: e.CreatedAt, UpdatedAt: e.UpdatedAt,
		SellerID: nonEmpty(e.SellerID), BuyerID: nonEmpty(e.BuyerID), Logs: append([]string{}, e.Logs...),
		PaymentID: nonEmpty(e.PaymentID), MerchantID: e.MerchantID, Environment: e.Environment,
		IsMerchant: e.IsMerchantSale(), ParentID: nonEmpty(e.ParentID)}
	if !e.PaidAt.IsZero() {
		v.PaidAt = nonEmpty(strconv.FormatInt(e.PaidAt.Unix(), 10))
	}
	if !e.CompletedAt.IsZero() {
		t := e.CompletedAt
		v.CompletedAt = &t
	}
	if e.Status == escrow.Claimed {
		v.ApprovedClaimBy = nonEmpty(e.SellerID)
	}
	return v
}
