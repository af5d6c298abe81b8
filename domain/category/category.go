// Package category is a merchant-defined escrow category: one aggregate (one
// stream) per category. Names are unique per merchant and environment,
// case-insensitively; the app layer makes that atomic by taking a
// reservation keyed by NameKey in the same append.
package category

import (
	"strings"
	"time"
	"unicode/utf8"

	"github.com/escrowd/escrowd/domain"
)

const (
	// MaxName is the longest name, in characters.
	MaxName = 100
	// MaxDescription is the longest description, in characters.
	MaxDescription = 500
)

// ErrNotFound is the one answer for a category that does not exist, was
// deleted, or belongs to another merchant or environment.
var ErrNotFound = domain.Errorf(domain.NotFound, "Category not found")

// State is the folded category.
type State struct {
	ID          string
	MerchantID  string
	Environment domain.Environment
	Name        string
	Description string
	// ImageURL is the category's image, when one was uploaded.
	ImageURL  string
	CreatedAt time.Time
	UpdatedAt time.Time
	Deleted   bool
}

// Exists reports whether the category was created and not deleted.
func (s State) Exists() bool { return s.ID != "" && !s.Deleted }

// Events. Created carries the tenant so read models need no join.
type (
	Created struct {
		CategoryID  string             `json:"categoryId"`
		MerchantID  string             `json:"merchantId"`
		Environment domain.Environment `json:"environment"`
		Name        string             `json:"name"`
		Description string             `json:"description"`
		ImageURL    string             `json:"imageUrl,omitempty"`
		CreatedAt   time.Time          `json:"createdAt"`
	}
	// Updated sets the fields that are not nil.
	Updated struct {
		Name        *string   `json:"name,omitempty"`
		Description *string   `json:"description,omitempty"`
		ImageURL    *string   `json:"imageUrl,omitempty"`
		UpdatedAt   time.Time `json:"updatedAt"`
	}
	Deleted struct {
		DeletedAt time.Time `json:"deletedAt"`
	}
)

func (Created) EventType() string { return "category.created" }
func (Updated) EventType() string { return "category.updated" }
func (Deleted) EventType() string { return "category.deleted" }

// Registry decodes category events.
var Registry = domain.NewRegistry(
	func() domain.Event { return &Created{} },
	func() domain.Event { return &Updated{} },
	func() domain.Event { return &Deleted{} },
)

// Apply folds one event.
func Apply(s State, ev domain.Event) State {
	switch e := ev.(type) {
	case Created:
		s = State{ID: e.CategoryID, MerchantID: e.MerchantID, Environment: e.Environment, Name: e.Name,
			Description: e.Description, ImageURL: e.ImageURL, CreatedAt: e.CreatedAt, UpdatedAt: e.CreatedAt}
	case Updated:
		if e.Name != nil {
			s.Name = *e.Name
		}
		if e.Description != nil {
			s.Description = *e.Description
		}
		if e.ImageURL != nil {
			s.ImageURL = *e.ImageURL
		}
		s.UpdatedAt = e.UpdatedAt
	case Deleted:
		s.Deleted, s.UpdatedAt = true, e.DeletedAt
	}
	return s
}

// NameKey names the reservation that makes a category name unique within
// one merchant and environment, whatever its case.
func NameKey(merchantID string, env domain.Environment, name string) string {
	return merchantID + ":" + string(env) + ":category:" + strings.ToLower(strings.TrimSpace(name))
}

// NameKey is the reservation key of the category's current name.
func (s State) NameKey() string { return NameKey(s.MerchantID, s.Environment, s.Name) }

func validName(raw string) (string, error) {
	v := strings.TrimSpace(raw)
	if v == "" {
		return "", domain.Invalidf("name is required")
	}
	if utf8.RuneCountInString(v) > MaxName {
		return "", domain.Invalidf("name must be at most 100 characters")
	}
	return v, nil
}

func validDescription(raw string) (string, error) {
	v := strings.TrimSpace(raw)
	if utf8.RuneCountInString(v) > MaxDescription {
		return "", domain.Invalidf("description must be at most 500 characters")
	}
	return v, nil
}

// New is the input of Create.
type New struct {
	Name, Description string
	ImageURL          string
}

// Create decides a new category id of merchantID in env. Uniqueness of the
// name is the reservation's job, decided in the same append.
func Create(id, merchantID string, env domain.Environment, in New, now time.Time) (Created, error) {
	name, err := validName(in.Name)
	if err != nil {
		return Created{}, err
	}
	desc, err := validDescription(in.Description)
	if err != nil {
		return Created{}, err
	}
	return Created{CategoryID: id, MerchantID: merchantID, Environment: env, Name: name, Description: desc,
		ImageURL: in.ImageURL, CreatedAt: now}, nil
}

// Edit is the input of Update: nil fields are unchanged.
type Edit struct {
	Name, Description *string
	// ImageURL replaces the image (an upload of the edit).
	ImageURL *string
}

// Update decides an edit. The event sets only what differs from s; when
// nothing differs, changed is false and nothing should be recorded.
func Update(s State, in Edit, now time.Time) (ev Updated, changed bool, err error) {
	if !s.Exists() {
		return Updated{}, false, ErrNotFound
	}
	if in.Name == nil && in.Description == nil && in.ImageURL == nil {
		return Updated{}, false, domain.Invalidf("Provide name or description")
	}
	ev.UpdatedAt = now
	if in.Name != nil {
		v, err := validName(*in.Name)
		if err != nil {
			return Updated{}, false, err
		}
		if v != s.Name {
			ev.Name = &v
		}
	}
	if in.Description != nil {
		v, err := validDescription(*in.Description)
		if err != nil {
			return Updated{}, false, err
		}
		if v != s.Description {
			ev.Description = &v
		}
	}
	if in.ImageURL != nil && *in.ImageURL != s.ImageURL {
		ev.ImageURL = in.ImageURL
	}
	return ev, ev.Name != nil || ev.Description != nil || ev.ImageURL != nil, nil
}

// Delete decides deleting the category; the caller releases its name.
func Delete(s State, now time.Time) (Deleted, error) {
	if !s.Exists() {
		return Deleted{}, ErrNotFound
	}
	return Deleted{DeletedAt: now}, nil
}
