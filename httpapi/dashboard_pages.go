package httpapi

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/escrow"
	"github.com/escrowd/escrowd/domain/ledger"
	"github.com/escrowd/escrowd/domain/merchant"
	"github.com/escrowd/escrowd/domain/money"
	"github.com/escrowd/escrowd/domain/webhook"
	"github.com/escrowd/escrowd/internal/app"
	"github.com/escrowd/escrowd/internal/dashauth"
	"github.com/escrowd/escrowd/projections"
	"github.com/escrowd/escrowd/view"
	"github.com/escrowd/escrowd/webhooks"
)

// The dashboard's pages. Reads go through the read models after the
// fence every API read takes (readModels), so a page shown after an
// action includes it; actions call the application's commands.

const dashPageSize = 25

// redirect sends the browser to path after an action (303: a GET).
func redirect(d dashCtx, path, done string) error {
	if done != "" {
		path += "?done=" + done
	}
	return d.Redirect(http.StatusSeeOther, path)
}

func (d dashCtx) base() string { return "/dashboard/" + string(d.Env) }

type overviewPage struct {
	Balances projections.Balances
	Recent   []escrow.State
	Disputes int64
}

func (s *Server) dashOverview(d dashCtx) error {
	q, err := s.readModels(d)
	if err != nil {
		return err
	}
	ctx := d.Request().Context()
	mid := d.Session.User.MerchantID
	var p overviewPage
	if p.Balances, err = q.Balances(ctx, mid, d.Env, ledger.HolderMerchant, mid); err != nil {
		return err
	}
	if p.Recent, _, err = q.Escrows(ctx, projections.EscrowFilter{MerchantID: mid, Environment: d.Env}, view.Page{Page: 1, Limit: 10}); err != nil {
		return err
	}
	_, pg, err := q.Disputes(ctx, projections.DisputeFilter{MerchantID: mid, Environment: d.Env, Status: string(escrow.Disputed)}, view.Page{Page: 1, Limit: 1})
	if err != nil {
		return err
	}
	p.Disputes = pg.Count
	return s.page(d, http.StatusOK, "overview.html", "overview", "Overview", p)
}

type escrowsPage struct {
	Find, Customer, Status string
	Statuses               []escrow.Status
	Escrows                []escrow.State
	Pagination             view.Pagination
	Page                   int
}

var dashStatuses = []escrow.Status{escrow.Pending, escrow.Ongoing, escrow.Disputed, escrow.Investigating,
	escrow.Completed, escrow.Claimed, escrow.Refunded, escrow.Split}

// dashEscrows finds escrows by payment token or id, customer or status.
func (s *Server) dashEscrows(d dashCtx) error {
	q, err := s.readModels(d)
	if err != nil {
		return err
	}
	ctx := d.Request().Context()
	p := escrowsPage{Find: strings.TrimSpace(d.QueryParam("find")), Customer: strings.TrimSpace(d.QueryParam("customer")),
		Status: strings.ToUpper(strings.TrimSpace(d.QueryParam("status"))), Statuses: dashStatuses, Page: pageNumber(d)}
	if p.Find != "" {
		e, found, err := q.EscrowByID(ctx, p.Find)
		if err != nil {
			return err
		}
		if !found {
			e, found, err = q.EscrowByToken(ctx, p.Find)
			if err != nil {
				return err
			}
		}
		if found && d.owns(e) {
			return d.Redirect(http.StatusSeeOther, d.base()+"/escrows/"+e.ID)
		}
		return s.page(d, http.StatusOK, "escrows.html", "escrows", "Escrows", p)
	}
	f := projections.EscrowFilter{MerchantID: d.Session.User.MerchantID, Environment: d.Env, Status: p.Status, PartyID: p.Customer}
	if p.Escrows, p.Pagination, err = q.Escrows(ctx, f, view.Page{Page: p.Page, Limit: dashPageSize}); err != nil {
		return err
	}
	return s.page(d, http.StatusOK, "escrows.html", "escrows", "Escrows", p)
}

// owns reports whether e is of the page's merchant and environment.
func (d dashCtx) owns(e escrow.State) bool {
	return e.Exists() && e.MerchantID == d.Session.User.MerchantID && e.Environment == d.Env
}

type timelineEntry struct {
	At    time.Time
	Type  string
	Actor string
	// Detail says what of the escrow an event not of its own names (the
	// webhook a redelivery was asked of).
	Detail string
}

type escrowPage struct {
	Escrow       escrow.State
	Timeline     []timelineEntry
	Deadline     string
	DeadlineAt   time.Time
	CanResolve   bool
	Balances     []partyBalance
	Resolution   resolveForm
	AdditionalOn bool
}

type partyBalance struct {
	Role, CustomerID string
	Balances         projections.Balances
}

type resolveForm struct {
	Status, SellerAmount, BuyerAmount, Resolution string
	Refundable                                    bool
}

var deadlineWords = map[escrow.DeadlineKind]string{
	escrow.AutoReleaseDeadline:  "Released to the seller",
	escrow.ExpiryDeadline:       "Deleted unless paid",
	escrow.WindowEndingDeadline: "Buyer reminded that the window ends",
}

func (s *Server) dashEscrow(d dashCtx) error { return s.escrowPageWith(d, resolveForm{}) }

func (s *Server) escrowPageWith(d dashCtx, form resolveForm) error {
	q, err := s.readModels(d)
	if err != nil {
		return err
	}
	ctx := d.Request().Context()
	e, found, err := q.EscrowByID(ctx, d.Param("escrowId"))
	if err != nil {
		return err
	}
	if !found || !d.owns(e) {
		d.Set("dashError", "No escrow of this merchant and environment has this id.")
		return s.page(d, http.StatusNotFound, "problem.html", "escrows", "Escrow not found", nil)
	}
	p := escrowPage{Escrow: e, CanResolve: e.Allows(escrow.ActResolve), Resolution: form}
	if kind, at, ok := e.NextDeadline(); ok {
		p.Deadline, p.DeadlineAt = deadlineWords[kind], at
		if p.Deadline == "" {
			p.Deadline = string(kind)
		}
	}
	if p.Timeline, err = s.timeline(ctx, d, e.ID); err != nil {
		return err
	}
	for _, party := range []struct{ role, id string }{{"Buyer", e.BuyerID}, {"Seller", e.SellerID}} {
		if party.id == "" {
			continue
		}
		b, err := q.Balances(ctx, e.MerchantID, e.Environment, ledger.HolderCustomer, party.id)
		if err != nil {
			return err
		}
		p.Balances = append(p.Balances, partyBalance{Role: party.role, CustomerID: party.id, Balances: b})
	}
	return s.page(d, dashStatus(d), "escrow.html", "escrows", "Escrow "+e.PaymentToken, p)
}

// timeline is the escrow's own events from the event store, each with who
// caused it: a dashboard user by email, a key by id, or the service.
func (s *Server) timeline(ctx context.Context, d dashCtx, id string) ([]timelineEntry, error) {
	if s.eventLog == nil {
		return nil, nil
	}
	events, err := s.eventLog.ReadStream(ctx, app.EscrowKind.StreamName(id), 0, 1000)
	if err != nil {
		return nil, err
	}
	users, err := s.users.Users(ctx, d.Session.User.MerchantID)
	if err != nil {
		return nil, err
	}
	emails := map[string]string{}
	for _, u := range users {
		emails[u.ID] = u.Email
	}
	out := make([]timelineEntry, 0, len(events))
	for _, ev := range events {
		var m domain.Meta
		_ = json.Unmarshal(ev.Metadata, &m)
		actor := m.Actor
		switch {
		case emails[actor] != "":
			actor = emails[actor] + " (dashboard)"
		case strings.HasPrefix(actor, "key_"):
			actor = "API key " + actor
		case actor == "":
			actor = "the service"
		}
		entry := timelineEntry{At: ev.RecordedAt, Type: ev.Type, Actor: actor}
		if ev.Type == (webhook.RedeliveryRequested{}).EventType() {
			var r webhook.RedeliveryRequested
			if err := json.Unmarshal(ev.Data, &r); err == nil {
				entry.Detail = r.Event + ", delivery " + r.DeliveryID
			}
		}
		out = append(out, entry)
	}
	return out, nil
}

func (s *Server) dashResolve(d dashCtx) error {
	r := d.Request()
	form := resolveForm{Status: strings.ToUpper(strings.TrimSpace(r.PostFormValue("status"))),
		SellerAmount: strings.TrimSpace(r.PostFormValue("sellerAmount")), BuyerAmount: strings.TrimSpace(r.PostFormValue("buyerAmount")),
		Resolution: strings.TrimSpace(r.PostFormValue("resolution")), Refundable: r.PostFormValue("additionalFeeRefundable") == "true"}
	res := escrow.Resolution{Status: form.Status, Message: form.Resolution}
	if r.PostFormValue("additionalFeeRefundable") != "" {
		res.AdditionalFeeRefundable = &form.Refundable
	}
	fail := func(err error) error { return s.dashFail(d, err, func() error { return s.escrowPageWith(d, form) }) }
	if form.Status == string(escrow.Split) {
		for _, f := range []struct {
			name, raw string
			dst       **money.Amount
		}{{"sellerAmount", form.SellerAmount, &res.SellerAmount}, {"buyerAmount", form.BuyerAmount, &res.BuyerAmount}} {
			a, err := amountOf(f.name, money.InputOf(strings.ReplaceAll(f.raw, ",", "")))
			if err != nil {
				return fail(err)
			}
			*f.dst = &a
		}
	}
	if _, err := s.app.ResolveDispute(r.Context(), d.actor(), d.Param("escrowId"), res); err != nil {
		if errors.Is(err, escrow.ErrNotFound) {
			err = domain.Errorf(domain.NotFound, "Escrow not found")
		}
		return fail(err)
	}
	return redirect(d, d.base()+"/escrows/"+d.Param("escrowId"), "resolved")
}

type disputesPage struct {
	Escrows    []escrow.State
	Pagination view.Pagination
	Page       int
}

// dashDisputes lists the escrows in dispute, newest first.
func (s *Server) dashDisputes(d dashCtx) error {
	q, err := s.readModels(d)
	if err != nil {
		return err
	}
	p := disputesPage{Page: pageNumber(d)}
	f := projections.DisputeFilter{MerchantID: d.Session.User.MerchantID, Environment: d.Env, Status: string(escrow.Disputed)}
	if p.Escrows, p.Pagination, err = q.Disputes(d.Request().Context(), f, view.Page{Page: p.Page, Limit: dashPageSize}); err != nil {
		return err
	}
	return s.page(d, http.StatusOK, "disputes.html", "disputes", "Disputes", p)
}

type customersPage struct {
	Customers  []projections.Customer
	Pagination view.Pagination
	Page       int
}

func (s *Server) dashCustomers(d dashCtx) error {
	q, err := s.readModels(d)
	if err != nil {
		return err
	}
	p := customersPage{Page: pageNumber(d)}
	if p.Customers, p.Pagination, err = q.ListCustomers(d.Request().Context(), d.Session.User.MerchantID, d.Env,
		view.Page{Page: p.Page, Limit: dashPageSize}); err != nil {
		return err
	}
	return s.page(d, dashStatus(d), "customers.html", "customers", "Customers", p)
}

func (s *Server) dashBlock(block bool) dashHandler {
	return func(d dashCtx) error {
		reason := strings.TrimSpace(d.Request().PostFormValue("reason"))
		if _, err := s.app.SetBlocked(d.Request().Context(), d.actor(), d.Param("customerId"), block, reason); err != nil {
			return s.dashFail(d, err, func() error { return s.dashCustomers(d) })
		}
		done := "unblocked"
		if block {
			done = "blocked"
		}
		return redirect(d, d.base()+"/customers", done)
	}
}

type webhooksPage struct {
	URL        string
	Deliveries []webhooks.Delivery
	Pagination view.Pagination
	Page       int
	Secret     string // a rotated secret, shown once
	Configured bool
}

func (s *Server) dashWebhooks(d dashCtx) error { return s.webhooksPageWith(d, http.StatusOK, "") }

func (s *Server) webhooksPageWith(d dashCtx, status int, secret string) error {
	ctx := d.Request().Context()
	m, err := s.app.Merchant(ctx, d.Session.User.MerchantID)
	if err != nil {
		return err
	}
	p := webhooksPage{URL: m.Webhooks[d.Env], Page: pageNumber(d), Secret: secret, Configured: s.hooks != nil}
	if s.hooks != nil {
		if p.Deliveries, p.Pagination, err = s.hooks.List(ctx, m.ID, d.Env, webhooks.DeliveryFilter{},
			view.Page{Page: p.Page, Limit: dashPageSize}); err != nil {
			return err
		}
	}
	if st := dashStatus(d); st != http.StatusOK {
		status = st
	}
	return s.page(d, status, "webhooks.html", "webhooks", "Webhooks", p)
}

func (s *Server) dashWebhookURL(d dashCtx) error {
	url := strings.TrimSpace(d.Request().PostFormValue("url"))
	ctx, cancel := context.WithTimeout(d.Request().Context(), 5*time.Second)
	defer cancel()
	again := func() error { return s.dashWebhooks(d) }
	if err := webhooks.ValidateCallbackURL(ctx, url, d.Env, s.cfg.WebhookAllowPrivate, nil); err != nil {
		return s.dashFail(d, err, again)
	}
	if _, err := s.app.SetWebhookURL(d.Request().Context(), d.actor(), url); err != nil {
		return s.dashFail(d, err, again)
	}
	return redirect(d, d.base()+"/webhooks", "url")
}

// dashRotateSecret replaces the environment's signing secret and shows
// the new one once.
func (s *Server) dashRotateSecret(d dashCtx) error {
	secret := app.NewSigningSecret()
	if _, err := s.app.ChangeMerchant(d.Request().Context(), d.actor(), func(m merchant.State) ([]domain.Event, error) {
		return []domain.Event{merchant.SigningSecretRotated{Environment: d.Env, Secret: secret}}, nil
	}); err != nil {
		return s.dashFail(d, err, func() error { return s.dashWebhooks(d) })
	}
	return s.webhooksPageWith(d, http.StatusOK, secret)
}

func (s *Server) dashRedeliver(d dashCtx) error {
	box, err := s.outbox()
	if err == nil {
		_, err = s.redeliver(d.Request().Context(), box, d.actor(), d.Param("id"))
	}
	if err != nil {
		return s.dashFail(d, err, func() error { return s.dashWebhooks(d) })
	}
	return redirect(d, d.base()+"/webhooks", "redelivered")
}

type keysPage struct {
	Keys   []merchant.Key
	Issued *app.IssuedKey // shown once
}

func (s *Server) dashKeys(d dashCtx) error { return s.keysPageWith(d, http.StatusOK, nil) }

func (s *Server) keysPageWith(d dashCtx, status int, issued *app.IssuedKey) error {
	m, err := s.app.Merchant(d.Request().Context(), d.Session.User.MerchantID)
	if err != nil {
		return err
	}
	p := keysPage{Issued: issued}
	for _, k := range m.Keys {
		if k.Environment == d.Env {
			p.Keys = append(p.Keys, k)
		}
	}
	sortKeys(p.Keys)
	if st := dashStatus(d); st != http.StatusOK {
		status = st
	}
	return s.page(d, status, "keys.html", "keys", "API keys", p)
}

func sortKeys(keys []merchant.Key) {
	for i := 1; i < len(keys); i++ {
		for j := i; j > 0 && (keys[j].Revoked == keys[j-1].Revoked && keys[j].ID < keys[j-1].ID || !keys[j].Revoked && keys[j-1].Revoked); j-- {
			keys[j], keys[j-1] = keys[j-1], keys[j]
		}
	}
}

func (s *Server) dashCreateKey(d dashCtx) error {
	role := merchant.Role(d.Request().PostFormValue("role"))
	k, _, err := s.app.IssueKeyAs(d.Request().Context(), d.actor(), role, KeyDigest)
	if err != nil {
		return s.dashFail(d, err, func() error { return s.dashKeys(d) })
	}
	return s.keysPageWith(d, http.StatusCreated, &k)
}

func (s *Server) dashRevokeKey(d dashCtx) error {
	if _, err := s.app.RevokeKeyAs(d.Request().Context(), d.actor(), d.Param("keyId")); err != nil && !errors.Is(err, app.ErrNothingToDo) {
		return s.dashFail(d, err, func() error { return s.dashKeys(d) })
	}
	return redirect(d, d.base()+"/keys", "revoked")
}

type allowlistPage struct {
	Entries string
}

func (s *Server) dashAllowlist(d dashCtx) error {
	m, err := s.app.Merchant(d.Request().Context(), d.Session.User.MerchantID)
	if err != nil {
		return err
	}
	return s.page(d, dashStatus(d), "allowlist.html", "allowlist", "IP allowlist", allowlistPage{Entries: strings.Join(m.Allowlist, "\n")})
}

// dashSetAllowlist replaces the allowlist (one address or CIDR a line).
// It applies to live keys only, so only the live pages change it.
func (s *Server) dashSetAllowlist(d dashCtx) error {
	again := func() error { return s.dashAllowlist(d) }
	if d.Env != domain.Live {
		return s.dashFail(d, domain.Invalidf("The allowlist applies to live keys: change it on the live pages"), again)
	}
	var entries []string
	for _, line := range strings.FieldsFunc(d.Request().PostFormValue("entries"), func(r rune) bool { return r == '\n' || r == ',' || r == '\r' }) {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		if _, _, err := net.ParseCIDR(line); err != nil && net.ParseIP(line) == nil {
			return s.dashFail(d, domain.Invalidf("%q is not an IP address or CIDR", line), again)
		}
		entries = append(entries, line)
	}
	if _, err := s.app.ChangeMerchant(d.Request().Context(), d.actor(), func(m merchant.State) ([]domain.Event, error) {
		return []domain.Event{merchant.AllowlistSet{Entries: entries}}, nil
	}); err != nil && !errors.Is(err, app.ErrNothingToDo) {
		return s.dashFail(d, err, again)
	}
	return redirect(d, d.base()+"/allowlist", "allowlist")
}

// dashLedgerCSV is the environment's transaction records (the merchant's
// and its customers') as CSV, newest first. A cell that a spreadsheet would read as a formula gets a leading
// apostrophe: narrations are typed by merchants' customers.
func (s *Server) dashLedgerCSV(d dashCtx) error {
	q, err := s.readModels(d)
	if err != nil {
		return err
	}
	h := d.Response().Header()
	h.Set(echoContentType, "text/csv; charset=utf-8")
	h.Set("Content-Disposition", `attachment; filename="ledger-`+string(d.Env)+`.csv"`)
	d.Response().WriteHeader(http.StatusOK)
	w := csv.NewWriter(d.Response())
	_ = w.Write([]string{"id", "reference", "createdAt", "transactionType", "creditType", "status", "amount", "fee", "currency",
		"customerId", "narration"})
	err = q.EachLedgerRecord(d.Request().Context(), d.Session.User.MerchantID, d.Env, func(raw []byte) error {
		var r ledger.Record
		if err := json.Unmarshal(raw, &r); err != nil {
			return err
		}
		return w.Write([]string{r.ID, cell(r.Reference), r.CreatedAt.UTC().Format(time.RFC3339), string(r.Type), string(r.CreditType),
			string(r.Status), r.Amount.String(), r.Fee.String(), r.Currency, r.CustomerID, cell(r.Narration)})
	})
	w.Flush()
	if err == nil {
		err = w.Error()
	}
	if err != nil {
		s.log.Error("ledger export failed", errField(err), reqField(d))
	}
	return nil
}

const echoContentType = "Content-Type"

// cell defuses a CSV cell a spreadsheet would evaluate.
func cell(s string) string {
	if s != "" && strings.ContainsRune("=+-@\t\r", rune(s[0])) {
		return "'" + s
	}
	return s
}

type usersPage struct {
	Users     []dashauth.User
	Roles     []dashauth.Role
	SetupLink string // shown once, after adding a user
	NewEmail  string
}

func (s *Server) dashUsers(d dashCtx) error { return s.usersPageWith(d, http.StatusOK, "", "") }

func (s *Server) usersPageWith(d dashCtx, status int, link, email string) error {
	users, err := s.users.Users(d.Request().Context(), d.Session.User.MerchantID)
	if err != nil {
		return err
	}
	if st := dashStatus(d); st != http.StatusOK {
		status = st
	}
	return s.page(d, status, "users.html", "users", "Users", usersPage{Users: users, SetupLink: link, NewEmail: email,
		Roles: []dashauth.Role{dashauth.Viewer, dashauth.Support, dashauth.Owner}})
}

// SetupLink is the page a new user chooses their password on.
func SetupLink(publicURL, token string) string {
	return strings.TrimRight(publicURL, "/") + "/dashboard/setup/" + token
}

func (s *Server) dashCreateUser(d dashCtx) error {
	again := func() error { return s.dashUsers(d) }
	role, err := dashauth.ParseRole(d.Request().PostFormValue("role"))
	if err != nil {
		return s.dashFail(d, domain.Invalidf("%s", err.Error()), again)
	}
	email := strings.TrimSpace(d.Request().PostFormValue("email"))
	u, token, err := s.users.CreateUser(d.Request().Context(), d.Session.User.MerchantID, email, role, d.Session.User.ID, s.app.Now())
	if err != nil {
		if errors.Is(err, dashauth.ErrEmailTaken) || strings.HasPrefix(err.Error(), "email") {
			return s.dashFail(d, domain.Invalidf("%s", err.Error()), again)
		}
		return err
	}
	if _, err := s.app.RecordDashboardUserAdded(d.Request().Context(), d.actor(), u.ID, string(u.Role)); err != nil {
		return err
	}
	return s.usersPageWith(d, http.StatusCreated, SetupLink(s.cfg.PublicURL, token), email)
}

func (s *Server) dashDeleteUser(d dashCtx) error {
	id := d.Param("userId")
	if id == d.Session.User.ID {
		return s.dashFail(d, domain.Invalidf("You cannot remove yourself; another owner can"), func() error { return s.dashUsers(d) })
	}
	deleted, err := s.users.DeleteUser(d.Request().Context(), d.Session.User.MerchantID, id)
	if err != nil {
		return err
	}
	if deleted {
		if _, err := s.app.RecordDashboardUserRemoved(d.Request().Context(), d.actor(), id); err != nil {
			return err
		}
	}
	return redirect(d, "/dashboard/users", "deleted")
}
