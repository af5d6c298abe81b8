package category

import (
	"slices"

	"github.com/escrowd/escrowd/domain"
)

// Order is the display order of one merchant environment's categories
// (listings are ordered by position; a category can be
// moved and the others renumber). It is one aggregate per merchant and
// environment: a move changes every later position at once, which only a
// single list can do atomically. Categories are few and rarely reordered,
// so serialising their creates, deletes and moves on it costs nothing that
// matters.
//
// Categories created before the order existed are not in it; listings put
// them after the ordered ones, newest first, and moving one places it.
type Order struct {
	IDs []string
}

// MaxCategories bounds one merchant environment's categories: the order
// lists them all in one event, which must stay a bounded size.
const MaxCategories = 500

// ErrTooManyCategories refuses a category past MaxCategories.
var ErrTooManyCategories = domain.Invalidf("A merchant may have at most %d categories", MaxCategories)

// Position returns id's 1-based position, or 0 when id is not in the order.
func (o Order) Position(id string) int { return slices.Index(o.IDs, id) + 1 }

// OrderSet records the whole new order: a listing is the ids in this order.
type OrderSet struct {
	MerchantID  string             `json:"merchantId"`
	Environment domain.Environment `json:"environment"`
	IDs         []string           `json:"ids"`
}

func (OrderSet) EventType() string { return "category.order_set" }

// OrderRegistry decodes order events.
var OrderRegistry = domain.NewRegistry(func() domain.Event { return &OrderSet{} })

// ApplyOrder folds one order event.
func ApplyOrder(o Order, ev domain.Event) Order {
	if e, ok := ev.(OrderSet); ok {
		o.IDs = slices.Clone(e.IDs)
	}
	return o
}

// Place decides the order once id is placed at position (1-based; 0 is
// the top, where a new category goes by default so listings stay newest
// first). A position past the end is refused by name (field). id must not
// be in the order yet.
func Place(o Order, merchantID string, env domain.Environment, id string, position int, field string) (OrderSet, error) {
	if len(o.IDs) >= MaxCategories {
		return OrderSet{}, ErrTooManyCategories
	}
	if position == 0 {
		position = 1
	}
	if position < 1 || position > len(o.IDs)+1 {
		return OrderSet{}, domain.Invalidf("%s must be an integer between 1 and %d", field, len(o.IDs)+1)
	}
	ids := slices.Insert(slices.Clone(o.IDs), position-1, id)
	return OrderSet{MerchantID: merchantID, Environment: env, IDs: ids}, nil
}

// Move decides moving id to newPosition (1-based) and renumbering the
// others; a category not yet in the order (created before it existed) is
// placed there. changed is false when id is already there.
func Move(o Order, merchantID string, env domain.Environment, id string, newPosition int) (ev OrderSet, changed bool, err error) {
	rest := slices.DeleteFunc(slices.Clone(o.IDs), func(v string) bool { return v == id })
	if newPosition < 1 || newPosition > len(rest)+1 {
		return OrderSet{}, false, domain.Invalidf("newPosition must be an integer between 1 and %d", len(rest)+1)
	}
	ids := slices.Insert(rest, newPosition-1, id)
	if slices.Equal(ids, o.IDs) {
		return OrderSet{}, false, nil
	}
	return OrderSet{MerchantID: merchantID, Environment: env, IDs: ids}, true, nil
}

// Remove decides the order without id (a deleted category); changed is
// false when id was not in it.
func Remove(o Order, merchantID string, env domain.Environment, id string) (ev OrderSet, changed bool) {
	if !slices.Contains(o.IDs, id) {
		return OrderSet{}, false
	}
	ids := slices.DeleteFunc(slices.Clone(o.IDs), func(v string) bool { return v == id })
	return OrderSet{MerchantID: merchantID, Environment: env, IDs: ids}, true
}

// OrderKey names the order aggregate of a merchant environment.
func OrderKey(merchantID string, env domain.Environment) string {
	return merchantID + ":" + string(env)
}
