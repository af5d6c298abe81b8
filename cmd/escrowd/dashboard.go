package main

import (
	"context"
	"flag"
	"fmt"

	"github.com/escrowd/escrowd/httpapi"
	"github.com/escrowd/escrowd/internal/app"
	"github.com/escrowd/escrowd/internal/dashauth"
)

var dashboardUserCreateCommand = &command{
	name: "dashboard-user create", args: "--merchant M --email E --role owner|support|viewer",
	summary: "a dashboard user; prints their one-time setup link (valid 72 hours)",
	detail: `The link opens a page where the user chooses a password; on their first
login they add a TOTP key to an authenticator app. The link is built on
ESCROW_PUBLIC_URL. Only a digest of it is stored: a lost link is replaced by
removing the user (an owner does, on the Users page) and creating them again.`,
	database: true,
	required: []string{"merchant", "email", "role"},
	define: func(fs *flag.FlagSet) runFunc {
		id := fs.String("merchant", "", "merchant id (required)")
		email := fs.String("email", "", "the user's email, their login (required)")
		r := fs.String("role", "", "owner, support or viewer (required)")
		return func(ctx context.Context, inv *invocation) error {
			role, err := dashauth.ParseRole(*r)
			if err != nil {
				return usageError(err.Error())
			}
			svc := service(inv.env)
			m, err := svc.Merchant(ctx, *id)
			if err != nil {
				return err
			}
			if !m.Exists() {
				return fmt.Errorf("merchant %s not found", *id)
			}
			users := dashauth.NewStore(inv.env.Pool, inv.env.Keyring)
			// The database may not have met a server of this version yet.
			if _, err := users.SealPlainSecrets(ctx); err != nil {
				return err
			}
			u, token, err := users.CreateUser(ctx, *id, *email, role, "operator", svc.Now())
			if err != nil {
				return err
			}
			if _, err := svc.RecordDashboardUserAdded(ctx, app.Actor{MerchantID: *id}, u.ID, string(u.Role)); err != nil {
				return fmt.Errorf("user %s created, but recording it failed: %w", u.ID, err)
			}
			fmt.Fprintf(inv.stdout, "user %s (%s, %s)\nsetup link: %s\n", u.ID, u.Email, u.Role, httpapi.SetupLink(inv.cfg.PublicURL, token))
			return nil
		}
	},
}
