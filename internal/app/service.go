package app

import (
	"github.com/escrowd/escrowd/domain"
)

// Service is the application: one method per use case.
type Service struct {
	Engine *Engine
}

// NewService returns the application over engine.
func NewService(engine *Engine) *Service { return &Service{Engine: engine} }

// Actor identifies who issues a command (for event metadata).
type Actor struct {
	MerchantID  string
	Environment domain.Environment
	KeyID       string // "" for operator commands
	RequestID   string
}

func (a Actor) meta() domain.Meta {
	actor := a.KeyID
	if actor == "" {
		actor = "operator"
	}
	return domain.Meta{MerchantID: a.MerchantID, Environment: a.Environment, Actor: actor, RequestID: a.RequestID}
}

func (s *Service) newID() string { return s.Engine.NewID().String() }
