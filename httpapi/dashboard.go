package httpapi

import (
	"bytes"
	"crypto/rand"
	"crypto/subtle"
	"embed"
	"errors"
	"html/template"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/escrow"
	"github.com/escrowd/escrowd/internal/app"
	"github.com/escrowd/escrowd/internal/dashauth"
)

// The merchant dashboard: server-rendered pages for a merchant's people,
// under /dashboard. A session cookie (HttpOnly, SameSite=Strict, Secure
// behind TLS) names a session kept in PostgreSQL (dashauth); every form
// carries the session's anti-forgery token, read from the body only; the
// pages have the checkout page's strict CSP (no script at all). Each
// environment has its own pages (/dashboard/test/…, /dashboard/live/…),
// marked on every page. Every action is a command of the application, the
// one the API runs, with the user as the actor.

//go:embed dashboard_templates/*.html dashboard_templates/dashboard.css
var dashboardFS embed.FS

var dashboardTemplates = template.Must(template.New("").Funcs(template.FuncMap{
	"naira": naira,
	"when": func(t time.Time) string {
		if t.IsZero() {
			return ""
		}
		return t.UTC().Format("2 Jan 2006, 15:04 UTC")
	},
	"table": func(base string, es []escrow.State) escrowTable { return escrowTable{Base: base, Escrows: es} },
	"whenp": func(t *time.Time) string {
		if t == nil || t.IsZero() {
			return ""
		}
		return t.UTC().Format("2 Jan 2006, 15:04 UTC")
	},
}).ParseFS(dashboardFS, "dashboard_templates/*.html"))

var dashboardCSS = func() []byte {
	b, err := dashboardFS.ReadFile("dashboard_templates/dashboard.css")
	if err != nil {
		panic(err)
	}
	return b
}()

// escrowTable is what the escrow-table template renders.
type escrowTable struct {
	Base    string
	Escrows []escrow.State
}

const (
	// dashCookie names the session.
	dashCookie = "escrowd_dashboard"
	// dashLoginCookie carries the anti-forgery token of the forms shown
	// before a session exists (login, setup), bound to the browser.
	dashLoginCookie = "escrowd_dashboard_form"
)

func (s *Server) dashboardRoutes() {
	limit := bodyLimit(64 << 10)
	g := s.e.Group("/dashboard", s.checkoutHeaders)
	g.GET("/assets/dashboard.css", func(c echo.Context) error {
		return c.Blob(http.StatusOK, "text/css; charset=utf-8", dashboardCSS)
	})
	g.GET("", s.dashHome)
	g.GET("/login", s.dashLoginPage)
	g.POST("/login", s.dashLogin, limit)
	g.GET("/setup/:token", s.dashSetupPage)
	g.POST("/setup/:token", s.dashSetup, limit)
	g.GET("/code", s.dashCodePage)
	g.POST("/code", s.dashCode, limit)
	g.POST("/logout", s.dashLogout, limit)

	read := func(h dashHandler) echo.HandlerFunc { return s.dashAuthed(dashauth.Viewer, h) }
	support := func(h dashHandler) echo.HandlerFunc { return s.dashAuthed(dashauth.Support, h) }
	owner := func(h dashHandler) echo.HandlerFunc { return s.dashAuthed(dashauth.Owner, h) }
	g.GET("/users", read(s.dashUsers))
	g.POST("/users", owner(s.dashCreateUser), limit)
	g.POST("/users/:userId/delete", owner(s.dashDeleteUser), limit)
	g.GET("/:env", read(s.dashOverview))
	g.GET("/:env/escrows", read(s.dashEscrows))
	g.GET("/:env/escrows/:escrowId", read(s.dashEscrow))
	g.POST("/:env/escrows/:escrowId/resolve", support(s.dashResolve), limit)
	g.GET("/:env/disputes", read(s.dashDisputes))
	g.GET("/:env/customers", read(s.dashCustomers))
	g.POST("/:env/customers/:customerId/block", support(s.dashBlock(true)), limit)
	g.POST("/:env/customers/:customerId/unblock", support(s.dashBlock(false)), limit)
	g.GET("/:env/webhooks", read(s.dashWebhooks))
	g.POST("/:env/webhooks/url", owner(s.dashWebhookURL), limit)
	g.POST("/:env/webhooks/secret", owner(s.dashRotateSecret), limit)
	g.POST("/:env/webhooks/deliveries/:id/redeliver", support(s.dashRedeliver), limit)
	g.GET("/:env/keys", read(s.dashKeys))
	g.POST("/:env/keys", owner(s.dashCreateKey), limit)
	g.POST("/:env/keys/:keyId/revoke", owner(s.dashRevokeKey), limit)
	g.GET("/:env/allowlist", read(s.dashAllowlist))
	g.POST("/:env/allowlist", owner(s.dashSetAllowlist), limit)
	g.GET("/:env/ledger.csv", read(s.dashLedgerCSV))
}

// dashCtx is what an authenticated page knows of its request.
type dashCtx struct {
	echo.Context
	Session dashauth.Session
	// Env is the environment the page shows ("" on pages of the merchant
	// as a whole: users).
	Env domain.Environment
}

func (d dashCtx) actor() app.Actor {
	return app.Actor{MerchantID: d.Session.User.MerchantID, Environment: d.Env, User: d.Session.User.ID,
		RequestID: d.Request().Header.Get("X-Request-Id")}
}

type dashHandler func(d dashCtx) error

// dashPage is what every dashboard template renders; P is the page's own.
type dashPage struct {
	Title     string
	Nav       string
	User      dashauth.User
	Env       domain.Environment
	Live      bool
	FormToken string
	Notice    string
	Error     string
	// Base is the environment's pages' path: /dashboard/test.
	Base string
	P    any
}

func (s *Server) renderDash(c echo.Context, status int, name string, p dashPage) error {
	var buf bytes.Buffer
	if err := dashboardTemplates.ExecuteTemplate(&buf, name, p); err != nil {
		return err
	}
	return c.HTMLBlob(status, buf.Bytes())
}

// page renders one of an authenticated user's pages.
func (s *Server) page(d dashCtx, status int, name, nav, title string, p any) error {
	env := d.Env
	if env == "" {
		env = domain.Test
	}
	pg := dashPage{Title: title, Nav: nav, User: d.Session.User, Env: d.Env, Live: d.Env == domain.Live,
		FormToken: d.Session.FormToken, Base: "/dashboard/" + string(env), P: p}
	if n, ok := dashNotices[d.QueryParam("done")]; ok {
		pg.Notice = n
	}
	if e, ok := d.Get("dashError").(string); ok {
		pg.Error = e
	}
	return s.renderDash(d, status, name, pg)
}

// dashNotices are the messages a page shows after an action redirected to
// it (?done=…): fixed texts, so the query string cannot put words on a page.
var dashNotices = map[string]string{
	"resolved":    "The dispute is resolved.",
	"blocked":     "The customer is blocked.",
	"unblocked":   "The customer is unblocked.",
	"redelivered": "The delivery is queued to be sent again.",
	"revoked":     "The key is revoked: requests with it are refused from now on.",
	"url":         "The webhook URL is saved.",
	"allowlist":   "The allowlist is saved.",
	"deleted":     "The user is removed.",
}

// problemPage answers an error on a page that has no session (yet).
func (s *Server) problemPage(c echo.Context, status int, title, message string) error {
	return s.renderDash(c, status, "problem.html", dashPage{Title: title, Error: message})
}

func (s *Server) secureCookies() bool { return strings.HasPrefix(s.cfg.PublicURL, "https://") }

func (s *Server) setSessionCookie(c echo.Context, value string) {
	c.SetCookie(&http.Cookie{Name: dashCookie, Value: value, Path: "/dashboard", HttpOnly: true, Secure: s.secureCookies(),
		SameSite: http.SameSiteStrictMode})
}

func (s *Server) clearSessionCookie(c echo.Context) {
	c.SetCookie(&http.Cookie{Name: dashCookie, Value: "", Path: "/dashboard", HttpOnly: true, Secure: s.secureCookies(),
		SameSite: http.SameSiteStrictMode, MaxAge: -1})
}

func sessionCookie(c echo.Context) string {
	if ck, err := c.Cookie(dashCookie); err == nil {
		return ck.Value
	}
	return ""
}

// preSessionToken sets a fresh anti-forgery token for a form shown before
// a session exists, in a cookie and (returned) in the form.
func (s *Server) preSessionToken(c echo.Context) string {
	t := rand.Text()
	c.SetCookie(&http.Cookie{Name: dashLoginCookie, Value: t, Path: "/dashboard", HttpOnly: true, Secure: s.secureCookies(),
		SameSite: http.SameSiteStrictMode, MaxAge: 3600})
	return t
}

func preSessionTokenValid(c echo.Context) bool {
	ck, err := c.Cookie(dashLoginCookie)
	got := c.Request().PostFormValue("csrf")
	return err == nil && ck.Value != "" && subtle.ConstantTimeCompare([]byte(ck.Value), []byte(got)) == 1
}

var errDashForged = errors.New("This form is no longer valid: reload the page and try again. Nothing was changed.")

// dashAuthed runs h for a logged-in user whose role allows need. Every
// POST must carry the session's anti-forgery token in its body; it is
// checked before the role, so a forged request learns nothing.
func (s *Server) dashAuthed(need dashauth.Role, h dashHandler) echo.HandlerFunc {
	return func(c echo.Context) error {
		if s.users == nil {
			return s.problemPage(c, http.StatusServiceUnavailable, "Dashboard unavailable", "The dashboard is not configured on this server.")
		}
		post := c.Request().Method == http.MethodPost
		ses, err := s.users.Session(c.Request().Context(), sessionCookie(c), s.app.Now())
		if errors.Is(err, dashauth.ErrNoSession) {
			if post {
				return s.problemPage(c, http.StatusUnauthorized, "Logged out", "Your session has ended: log in again. Nothing was changed.")
			}
			return c.Redirect(http.StatusSeeOther, "/dashboard/login")
		}
		if err != nil {
			return err
		}
		if !ses.Active {
			if post {
				return s.problemPage(c, http.StatusUnauthorized, "Code needed", "Enter your authenticator code first. Nothing was changed.")
			}
			return c.Redirect(http.StatusSeeOther, "/dashboard/code")
		}
		d := dashCtx{Context: c, Session: ses}
		if raw := c.Param("env"); raw != "" {
			env := domain.Environment(raw)
			if !env.Valid() {
				return s.page(d, http.StatusNotFound, "problem.html", "", "Not found", nil)
			}
			d.Env = env
		}
		if post && subtle.ConstantTimeCompare([]byte(ses.FormToken), []byte(c.Request().PostFormValue("csrf"))) != 1 {
			c.Set("dashError", errDashForged.Error())
			return s.page(d, http.StatusForbidden, "problem.html", "", "Form expired", nil)
		}
		if !ses.User.Role.Allows(need) {
			c.Set("dashError", "Your role ("+string(ses.User.Role)+") may not do this; ask an owner. Nothing was changed.")
			return s.page(d, http.StatusForbidden, "problem.html", "", "Not allowed", nil)
		}
		return h(d)
	}
}

// dashFail shows an action's refusal on the page the action came from:
// a domain error's message under its status, anything else logged and a
// plain 500.
func (s *Server) dashFail(d dashCtx, err error, again func() error) error {
	var de *domain.Error
	if !errors.As(err, &de) {
		s.log.Error("dashboard action failed", errField(err), reqField(d))
		d.Set("dashError", "Something went wrong on our side; nothing was changed. Try again in a moment.")
		return s.page(d, http.StatusInternalServerError, "problem.html", "", "Something went wrong", nil)
	}
	d.Set("dashError", de.Message)
	d.Set("dashStatus", statusOf(de.Code))
	return again()
}

// dashStatus is the status a page renders with: 200, or the refusal's
// status when it shows one (dashFail).
func dashStatus(d dashCtx) int {
	if st, ok := d.Get("dashStatus").(int); ok {
		return st
	}
	return http.StatusOK
}

func (s *Server) dashHome(c echo.Context) error {
	if s.users != nil {
		if ses, err := s.users.Session(c.Request().Context(), sessionCookie(c), s.app.Now()); err == nil && ses.Active {
			return c.Redirect(http.StatusSeeOther, "/dashboard/test")
		}
	}
	return c.Redirect(http.StatusSeeOther, "/dashboard/login")
}

type loginForm struct {
	Email string
	Token string
}

func (s *Server) dashLoginPage(c echo.Context) error {
	return s.renderDash(c, http.StatusOK, "login.html", dashPage{Title: "Log in", P: loginForm{Token: s.preSessionToken(c)}})
}

func (s *Server) dashLogin(c echo.Context) error {
	if s.users == nil {
		return s.problemPage(c, http.StatusServiceUnavailable, "Dashboard unavailable", "The dashboard is not configured on this server.")
	}
	email := strings.TrimSpace(c.Request().PostFormValue("email"))
	again := func(status int, msg string) error {
		return s.renderDash(c, status, "login.html", dashPage{Title: "Log in", Error: msg,
			P: loginForm{Email: email, Token: s.preSessionToken(c)}})
	}
	if !preSessionTokenValid(c) {
		return again(http.StatusForbidden, errDashForged.Error())
	}
	cookie, err := s.users.CheckPassword(c.Request().Context(), email, c.Request().PostFormValue("password"), s.app.Now())
	switch {
	case errors.Is(err, dashauth.ErrLocked):
		return again(http.StatusTooManyRequests, err.Error())
	case errors.Is(err, dashauth.ErrBadCredentials):
		return again(http.StatusUnauthorized, err.Error())
	case err != nil:
		return err
	}
	// A new session id at every step: whatever cookie the browser had
	// before is not the one it has now.
	s.setSessionCookie(c, cookie)
	return c.Redirect(http.StatusSeeOther, "/dashboard/code")
}

type codeForm struct {
	Token  string
	Secret string // the TOTP secret to add, until a code confirms it
	URL    string
}

// dashCodePage asks a user at the password stage for a TOTP code, and on
// their first login shows the secret to add to an authenticator.
func (s *Server) dashCodePage(c echo.Context) error { return s.codePage(c, http.StatusOK) }

func (s *Server) codePage(c echo.Context, status int) error {
	if s.users == nil {
		return c.Redirect(http.StatusSeeOther, "/dashboard/login")
	}
	ses, err := s.users.Session(c.Request().Context(), sessionCookie(c), s.app.Now())
	if err != nil || ses.Active {
		return c.Redirect(http.StatusSeeOther, "/dashboard")
	}
	f := codeForm{Token: ses.FormToken}
	if !ses.User.TOTPConfirmed {
		if f.Secret, err = s.users.PendingTOTPSecret(c.Request().Context(), ses.User); err != nil {
			return err
		}
		f.URL = dashauth.TOTPKeyURL(ses.User.Email, f.Secret)
	}
	return s.renderDash(c, status, "code.html", dashPage{Title: "Authenticator code", P: f, Error: errorOf(c)})
}

func errorOf(c echo.Context) string {
	e, _ := c.Get("dashError").(string)
	return e
}

func (s *Server) dashCode(c echo.Context) error {
	if s.users == nil {
		return c.Redirect(http.StatusSeeOther, "/dashboard/login")
	}
	ctx := c.Request().Context()
	ses, err := s.users.Session(ctx, sessionCookie(c), s.app.Now())
	if err != nil || ses.Active {
		return s.problemPage(c, http.StatusUnauthorized, "Logged out", "Your session has ended: log in again.")
	}
	if subtle.ConstantTimeCompare([]byte(ses.FormToken), []byte(c.Request().PostFormValue("csrf"))) != 1 {
		return s.problemPage(c, http.StatusForbidden, "Form expired", errDashForged.Error())
	}
	cookie, err := s.users.CheckCode(ctx, sessionCookie(c), c.Request().PostFormValue("code"), s.app.Now())
	switch {
	case errors.Is(err, dashauth.ErrLocked):
		return s.problemPage(c, http.StatusTooManyRequests, "Locked", err.Error())
	case errors.Is(err, dashauth.ErrBadCredentials):
		c.Set("dashError", "That code is not right, or was used already. Enter the code your authenticator shows now.")
		return s.codePage(c, http.StatusUnauthorized)
	case errors.Is(err, dashauth.ErrNoSession):
		return s.problemPage(c, http.StatusUnauthorized, "Logged out", "Your session has ended: log in again.")
	case err != nil:
		return err
	}
	s.setSessionCookie(c, cookie)
	return c.Redirect(http.StatusSeeOther, "/dashboard/test")
}

func (s *Server) dashLogout(c echo.Context) error {
	if s.users != nil {
		ctx := c.Request().Context()
		ses, err := s.users.Session(ctx, sessionCookie(c), s.app.Now())
		if err == nil && subtle.ConstantTimeCompare([]byte(ses.FormToken), []byte(c.Request().PostFormValue("csrf"))) != 1 {
			return s.problemPage(c, http.StatusForbidden, "Form expired", errDashForged.Error())
		}
		if err == nil {
			if err := s.users.End(ctx, sessionCookie(c)); err != nil {
				return err
			}
		}
	}
	s.clearSessionCookie(c)
	return c.Redirect(http.StatusSeeOther, "/dashboard/login")
}

type setupForm struct {
	Email string
	Token string
	Path  string
}

func (s *Server) dashSetupPage(c echo.Context) error {
	if s.users == nil {
		return s.problemPage(c, http.StatusServiceUnavailable, "Dashboard unavailable", "The dashboard is not configured on this server.")
	}
	u, err := s.users.SetupUser(c.Request().Context(), c.Param("token"), s.app.Now())
	if errors.Is(err, dashauth.ErrSetupUsed) {
		return s.problemPage(c, http.StatusGone, "Setup link not valid", err.Error())
	}
	if err != nil {
		return err
	}
	return s.renderDash(c, http.StatusOK, "setup.html", dashPage{Title: "Choose a password",
		P: setupForm{Email: u.Email, Token: s.preSessionToken(c), Path: c.Request().URL.Path}})
}

func (s *Server) dashSetup(c echo.Context) error {
	if s.users == nil {
		return s.problemPage(c, http.StatusServiceUnavailable, "Dashboard unavailable", "The dashboard is not configured on this server.")
	}
	ctx := c.Request().Context()
	token := c.Param("token")
	u, err := s.users.SetupUser(ctx, token, s.app.Now())
	if errors.Is(err, dashauth.ErrSetupUsed) {
		return s.problemPage(c, http.StatusGone, "Setup link not valid", err.Error())
	}
	if err != nil {
		return err
	}
	again := func(status int, msg string) error {
		return s.renderDash(c, status, "setup.html", dashPage{Title: "Choose a password", Error: msg,
			P: setupForm{Email: u.Email, Token: s.preSessionToken(c), Path: c.Request().URL.Path}})
	}
	if !preSessionTokenValid(c) {
		return again(http.StatusForbidden, errDashForged.Error())
	}
	pw := c.Request().PostFormValue("password")
	if err := dashauth.CheckPasswordRules(pw, c.Request().PostFormValue("confirm")); err != nil {
		return again(http.StatusBadRequest, err.Error())
	}
	cookie, err := s.users.CompleteSetup(ctx, token, pw, s.app.Now())
	if errors.Is(err, dashauth.ErrSetupUsed) {
		return s.problemPage(c, http.StatusGone, "Setup link not valid", err.Error())
	}
	if err != nil {
		return err
	}
	s.setSessionCookie(c, cookie)
	return c.Redirect(http.StatusSeeOther, "/dashboard/code")
}

// pageNumber reads ?page= (1 when absent or not a positive number).
func pageNumber(c echo.Context) int {
	if v, err := strconv.Atoi(c.QueryParam("page")); err == nil && v > 0 {
		return min(v, maxPage)
	}
	return 1
}
