package merchant

// EscrowDefaults are what the merchant's new escrows take when a request
// leaves them out.
type EscrowDefaults struct {
	// AutoRelease: a new standard escrow is released by the service when
	// its delivery window elapses, unless its request says otherwise.
	AutoRelease bool `json:"autoRelease"`
}

// EscrowDefaultsSet is an operator's change of the merchant's escrow
// defaults; escrows created before keep what they were created with.
type EscrowDefaultsSet struct {
	Defaults EscrowDefaults `json:"defaults"`
}

func (EscrowDefaultsSet) EventType() string { return "merchant.escrow_defaults_set" }
