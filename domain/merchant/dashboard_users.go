package merchant

import "time"

// The merchant's dashboard users are kept by the dashboard (their login,
// email and password are credentials and personal data, not domain
// state); who added or removed one, and when, is recorded here. The
// merchant's state does not change.
type (
	// DashboardUserAdded: a person was given a dashboard login with Role
	// (owner, support or viewer).
	DashboardUserAdded struct {
		UserID string    `json:"userId"`
		Role   string    `json:"role"`
		At     time.Time `json:"at"`
	}
	// DashboardUserRemoved: a dashboard login was removed with its sessions.
	DashboardUserRemoved struct {
		UserID string    `json:"userId"`
		At     time.Time `json:"at"`
	}
)

func (DashboardUserAdded) EventType() string   { return "merchant.dashboard_user_added" }
func (DashboardUserRemoved) EventType() string { return "merchant.dashboard_user_removed" }
