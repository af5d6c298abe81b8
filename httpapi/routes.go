package httpapi

// routes registers every API route; each area has its own file.
func (s *Server) routes() {
	s.customerRoutes()
	s.cryptoRoutes()
	s.paymentRoutes()
	s.escrowRoutes()
	s.disputeRoutes()
	s.milestoneRoutes()
	s.vaultRoutes()
	s.categoryRoutes()
	s.fileRoutes()
	s.webhookRoutes()
	s.docRoutes()
	s.eventRoutes()
	s.checkoutRoutes()
	s.providerHookRoutes()
	s.dashboardRoutes()
}
