package httpapi

import "github.com/escrowd/escrowd/eventstore"

type positionLike = eventstore.Position

// routes registers every API route; each area has its own file.
func (s *Server) routes() {
	s.customerRoutes()
}
