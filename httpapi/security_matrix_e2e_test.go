package httpapi

import (
	"fmt"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/merchant"
	"github.com/escrowd/escrowd/internal/files"
)

// The tenancy matrix: every registered route, attacked with another
// tenant's ids (another merchant's, and the same merchant's other
// environment's) in its path, its body and its customer-id header.
//
// Adding a route means adding its row to tenancyMatrix: one line naming
// the route ("METHOD /path/:param", as registered) and how to attack it.
// Path parameters are filled with the victim's ids by name (paramKinds,
// or the row's params); {{kind}} in a body or query is replaced the same
// way ({{freshPhone}} is a new phone number each time).
// TestTenancyMatrixCoversEveryRoute fails for a route without a row.
//
// Every attack must answer 4xx, unless the row says mayPass (the route
// reads nothing of the victim by id: a listing, a create, reference data;
// it may answer 2xx about the caller's own data). Either way no response
// may contain the victim's data that the request did not itself send.

// matrixRow says how to attack one route.
type matrixRow struct {
	// cid is the attacker's own customer the request acts for: "seller",
	// "buyer" or "" (none).
	cid string
	// query is appended to the path; bodies are JSON, each sent in turn
	// (none: one request without a body).
	query  string
	bodies []string
	// params maps path parameters to the id kinds they take, where the
	// parameter's name alone does not say (paramKinds).
	params map[string]string
	// mayPass: 2xx is allowed (leaks are still checked).
	mayPass bool
	// ignoresCID: the route ignores customer-id, so the victim's customer
	// in it is no attack (CIDIgnored routes).
	ignoresCID bool
	// public, when set, is why the route answers without a key; it is
	// still probed for leaks.
	public string
	// showsItsTarget: the route's purpose is to show the resource its
	// path names to whoever holds that id (a payment link shows its
	// escrow's terms), so the target's own terms in the answer are no
	// leak; every other marker of the victim still is.
	showsItsTarget bool
}

// dashPublic is why a dashboard page needs no API key.
const dashPublic = "a dashboard page: the session cookie of a dashboard user is the capability"

// paramKinds are the id kinds of path parameters by name.
var paramKinds = map[string]string{"customerId": "customerId", "paymentToken": "paymentToken", "escrowId": "escrowId",
	"id": "categoryId", "addressId": "addressId", "phone": "phone", "name": "fileName", "milestoneId": "milestoneId"}

var tenancyMatrix = map[string]matrixRow{
	"GET /healthz":      {public: "liveness probe: no data"},
	"GET /readyz":       {public: "readiness probe: lags and positions, no tenant data"},
	"GET /files/:name":  {public: "uploaded images by unguessable name"},
	"HEAD /files/:name": {public: "uploaded images by unguessable name"},
	"GET /files/:owner/:name": {public: "uploaded files by unguessable name, in their merchant environment's folder",
		params: map[string]string{"owner": "fileOwner"}},
	"HEAD /files/:owner/:name": {public: "uploaded files by unguessable name, in their merchant environment's folder",
		params: map[string]string{"owner": "fileOwner"}},
	"GET /v1/countries":                   {mayPass: true, ignoresCID: true},
	"GET /v1/payment/bank-list":           {mayPass: true, ignoresCID: true},
	"GET /v1/payment/verify-phone/:phone": {ignoresCID: true},

	"POST /v1/customer/create": {mayPass: true,
		bodies: []string{`{"firstname":"Eve","lastname":"Mallory","email":"{{email}}","phone":"{{freshPhone}}"}`}},
	"GET /v1/customer/get/:customerId":         {},
	"GET /v1/customers":                        {mayPass: true, query: "email={{email}}"},
	"PUT /v1/customer/update/:customerId":      {bodies: []string{`{"firstname":"Eve"}`}},
	"PUT /v1/customer/permissions/:customerId": {bodies: []string{`{"canBuy":false,"canSell":false,"canWithdraw":false}`}},
	"PUT /v1/customer/block/:customerId":       {bodies: []string{`{"reason":"attack"}`}},
	"PUT /v1/customer/unblock/:customerId":     {},

	"POST /v1/escrow/category/create":       {mayPass: true, ignoresCID: true, bodies: []string{`{"name":"{{categoryName}}"}`}},
	"PUT /v1/escrow/category/edit/:id":      {ignoresCID: true, bodies: []string{`{"name":"Stolen"}`}},
	"GET /v1/escrow/category/get":           {mayPass: true, ignoresCID: true},
	"GET /v1/escrow/category/get/:id":       {ignoresCID: true},
	"DELETE /v1/escrow/category/delete/:id": {ignoresCID: true},

	"POST /v1/escrow/create": {cid: "seller",
		bodies: []string{`{"amount":5000,"purpose":"attack","whoPays":"buyer","categoryId":"{{categoryId}}"}`}},
	"PUT /v1/escrow/edit/:paymentToken":           {cid: "seller", bodies: []string{`{"purpose":"stolen"}`}},
	"DELETE /v1/escrow/delete/:paymentToken":      {cid: "seller"},
	"GET /v1/escrow/verify/:paymentToken":         {cid: "seller"},
	"GET /v1/escrow/claim-funds/:paymentToken":    {cid: "seller"},
	"POST /v1/escrow/confirm-payment/:escrowId":   {cid: "buyer"},
	"POST /v1/escrow/extend-window/:paymentToken": {cid: "buyer", bodies: []string{`{"by": 1}`}},
	"POST /v1/escrow/refund/:escrowId":            {bodies: []string{`{"amount": 1}`}},
	"GET /v1/escrow/transactions":                 {cid: "seller", mayPass: true, query: "type=sales&paymentToken={{paymentToken}}"},
	"GET /v1/escrow/feeds":                        {mayPass: true, query: "customerId={{customerId}}&paymentToken={{paymentToken}}&categoryId={{categoryId}}"},
	"PUT /v1/escrow/additional-fee/:paymentToken": {bodies: []string{`{"additionalFee":100}`}},
	"POST /v1/payment/escrow": {cid: "buyer", bodies: []string{
		`{"amount":5125,"reference":"attack-pay","transactionType":"escrow","gateway":"wallet","escrowDetails":{"escrowId":"{{escrowId}}"}}`,
		`{"amount":5125,"reference":"attack-pay-2","transactionType":"escrow","gateway":"wallet","escrowDetails":{"escrowId":["{{escrowId}}"]}}`}},

	"GET /v1/wallet":         {cid: "buyer", mayPass: true},
	"POST /v1/payment/topup": {cid: "buyer", mayPass: true, bodies: []string{`{"amount":1000}`}},
	"POST /v1/payment/create-intent": {cid: "buyer", bodies: []string{
		`{"amount":100,"reference":"attack-transfer","transactionType":"wallet_transfer","walletDetails":{"phone":"{{phone}}","narration":"x"}}`,
		`{"amount":5125,"reference":"attack-intent","transactionType":"escrow","escrowDetails":{"escrowId":"{{escrowId}}"}}`}},
	// A batch answers 200 with a refusal entry per reference it may not
	// run (the leak check still applies); a single reference is a 4xx.
	"POST /v1/payment/verify": {cid: "buyer", mayPass: true, bodies: []string{`{"reference":"{{reference}}"}`, `{"references":["{{reference}}"]}`}},
	"POST /v1/payment/verify-account": {cid: "buyer", mayPass: true,
		bodies: []string{`{"accountNumber":"0123456789","bankCode":"058"}`}},
	"GET /v1/payment/history":       {cid: "buyer", mayPass: true, query: "reference={{reference}}"},
	"GET /v1/merchant/balance":      {mayPass: true},
	"GET /v1/merchant/transactions": {mayPass: true},

	"GET /v1/whitelist-address":                 {cid: "buyer", mayPass: true},
	"POST /v1/whitelist-address":                {cid: "buyer", mayPass: true, bodies: []string{`{"walletAddress":"{{address}}","network":"BSC"}`}},
	"DELETE /v1/whitelist-address/:addressId":   {cid: "buyer"},
	"GET /v1/payment/get-master-wallet-address": {mayPass: true, ignoresCID: true},
	"GET /v1/payment/deposit/wallet":            {mayPass: true, ignoresCID: true},
	"POST /v1/payment/virtual-account":          {ignoresCID: true},

	"GET /v1/merchant/webhook":                       {mayPass: true},
	"PUT /v1/merchant/webhook":                       {mayPass: true, bodies: []string{`{"url":"{{webhookURL}}"}`}},
	"GET /v1/merchant/webhook/deliveries":            {mayPass: true},
	"POST /v1/merchant/webhook/deliveries/:id/retry": {params: map[string]string{"id": "deliveryId"}},

	"GET /v1/events":                       {mayPass: true, query: "type=escrow."},
	"PUT /v1/escrow/category/position/:id": {ignoresCID: true, bodies: []string{`{"newPosition":1}`}},

	"POST /v1/escrow/submit-dispute/:paymentToken": {cid: "buyer", bodies: []string{`{"message":"attack"}`}},
	"GET /v1/escrow/dispute/get":                   {cid: "buyer", mayPass: true, query: "paymentToken={{paymentToken}}"},
	"GET /v1/escrow/dispute/get/:escrowId":         {cid: "buyer"},
	"GET /v1/escrow/all-dispute":                   {mayPass: true, query: "paymentToken={{paymentToken}}"},
	"POST /v1/escrow/dispute/resolve/:escrowId": {bodies: []string{`{"status":"REFUNDED"}`,
		`{"status":"SPLIT","sellerAmount":1,"buyerAmount":1}`}},

	"POST /v1/escrow/milestone/create": {cid: "seller", bodies: []string{
		`{"amount":2000,"purpose":"attack","milestones":[{"title":"a","amount":1000,"customerId":"{{customerId}}"},{"title":"b","amount":1000}]}`,
		`{"amount":2000,"purpose":"attack","categoryId":"{{categoryId}}","milestones":[{"title":"a","amount":1000},{"title":"b","amount":1000}]}`}},
	"PUT /v1/escrow/milestone/edit/:paymentToken": {cid: "seller", bodies: []string{`{"purpose":"stolen"}`}},
	"PUT /v1/escrow/milestone/convert/:paymentToken": {cid: "seller",
		bodies: []string{`{"milestones":[{"title":"a","amount":2500},{"title":"b","amount":2500}]}`}},
	"GET /v1/escrow/milestone/:paymentToken":                   {cid: "seller"},
	"POST /v1/escrow/milestone/confirm/:escrowId/:milestoneId": {cid: "buyer"},

	"POST /v1/escrow/vault/create": {bodies: []string{
		`{"purpose":"attack","participants":[{"customerId":"{{customerId}}","amount":600},{"customerId":"{{customerId}}","amount":600}]}`}},
	"POST /v1/escrow/vault/winner/:paymentToken": {bodies: []string{`{"winnerId":"{{customerId}}"}`}},
	"POST /v1/escrow/vault/cancel/:paymentToken": {},
	"GET /v1/escrow/vault/:paymentToken":         {},

	"POST /v1/checkout/sessions":    {bodies: []string{`{"paymentToken":"{{paymentToken}}","customerId":"{{customerId}}"}`}},
	"GET /v1/checkout/sessions/:id": {params: map[string]string{"id": "checkoutId"}},
	"GET /checkout/:id": {public: "the buyer's checkout page: the unguessable session id is the capability",
		params: map[string]string{"id": "checkoutId"}},
	"POST /checkout/:id/pay": {public: "a checkout page form: the session id and its anti-forgery token are the capability",
		params: map[string]string{"id": "checkoutId"}},
	"POST /checkout/:id/topup": {public: "a checkout page form: the session id and its anti-forgery token are the capability",
		params: map[string]string{"id": "checkoutId"}},
	"POST /checkout/:id/provider": {public: "a checkout page form: the session id and its anti-forgery token are the capability",
		params: map[string]string{"id": "checkoutId"}},
	"GET /checkout/return": {public: "where the payment provider sends a payer back: it asks the provider about the reference and shows only that payment's outcome"},
	"POST /checkout/:id/cancel": {public: "a checkout page form: the session id and its anti-forgery token are the capability",
		params: map[string]string{"id": "checkoutId"}},
	"GET /checkout/assets/checkout.css": {public: "the checkout page's stylesheet"},
	"echo_route_not_found /checkout":    {public: "the checkout pages' not-found handler"},
	"echo_route_not_found /checkout/*":  {public: "the checkout pages' not-found handler"},
	"GET /escrow/:paymentToken": {public: "the payment link: the escrow's terms for whoever holds its token; it shows no customer's data and opens only deposit-only sessions",
		params: map[string]string{"paymentToken": "paymentToken"}, showsItsTarget: true},
	"POST /escrow/:paymentToken": {public: "the payment link's form: its cookie-bound anti-forgery token; the session it opens pays only with a deposit made for it",
		params: map[string]string{"paymentToken": "paymentToken"}, showsItsTarget: true},
	"echo_route_not_found /escrow":   {public: "the payment links' not-found handler"},
	"echo_route_not_found /escrow/*": {public: "the payment links' not-found handler"},
	"GET /openapi.json":              {public: "the API reference"},
	"POST /hooks/paystack/:env": {public: "the provider's signed events: the signature is the capability, and money moves only on the provider's own answer",
		params: map[string]string{"env": "environment"}, bodies: []string{`{"event":"transfer.success","data":{"id":1,"reference":"{{reference}}"}}`}},
	"GET /docs": {public: "the API reference, rendered"},
	// The dashboard answers a request without its session cookie with the
	// login page (GET) or 401 (POST); dashboard_security_e2e_test.go
	// attacks it with the sessions of another merchant's users.
	"GET /dashboard":                                         {public: dashPublic},
	"GET /dashboard/assets/dashboard.css":                    {public: "the dashboard's stylesheet"},
	"GET /dashboard/login":                                   {public: "the dashboard's login form"},
	"POST /dashboard/login":                                  {public: "the dashboard's login: email, password and the form's cookie-bound token are the capability"},
	"GET /dashboard/setup/:token":                            {public: "a dashboard user's one-time setup link: the unguessable token is the capability", params: map[string]string{"token": "setupToken"}},
	"POST /dashboard/setup/:token":                           {public: "a dashboard user's one-time setup link: the unguessable token is the capability", params: map[string]string{"token": "setupToken"}},
	"GET /dashboard/code":                                    {public: dashPublic},
	"POST /dashboard/code":                                   {public: dashPublic},
	"POST /dashboard/logout":                                 {public: dashPublic},
	"GET /dashboard/users":                                   {public: dashPublic},
	"POST /dashboard/users":                                  {public: dashPublic, bodies: []string{`email=x@victim.example&role=owner`}},
	"POST /dashboard/users/:userId/delete":                   {public: dashPublic, params: map[string]string{"userId": "userId"}},
	"GET /dashboard/:env":                                    {public: dashPublic, params: map[string]string{"env": "environment"}},
	"GET /dashboard/:env/escrows":                            {public: dashPublic, params: map[string]string{"env": "environment"}, query: "find={{escrowId}}"},
	"GET /dashboard/:env/escrows/:escrowId":                  {public: dashPublic, params: map[string]string{"env": "environment"}},
	"POST /dashboard/:env/escrows/:escrowId/resolve":         {public: dashPublic, params: map[string]string{"env": "environment"}},
	"GET /dashboard/:env/disputes":                           {public: dashPublic, params: map[string]string{"env": "environment"}},
	"GET /dashboard/:env/customers":                          {public: dashPublic, params: map[string]string{"env": "environment"}},
	"POST /dashboard/:env/customers/:customerId/block":       {public: dashPublic, params: map[string]string{"env": "environment"}},
	"POST /dashboard/:env/customers/:customerId/unblock":     {public: dashPublic, params: map[string]string{"env": "environment"}},
	"GET /dashboard/:env/webhooks":                           {public: dashPublic, params: map[string]string{"env": "environment"}},
	"POST /dashboard/:env/webhooks/url":                      {public: dashPublic, params: map[string]string{"env": "environment"}},
	"POST /dashboard/:env/webhooks/secret":                   {public: dashPublic, params: map[string]string{"env": "environment"}},
	"POST /dashboard/:env/webhooks/deliveries/:id/redeliver": {public: dashPublic, params: map[string]string{"env": "environment", "id": "deliveryId"}},
	"GET /dashboard/:env/keys":                               {public: dashPublic, params: map[string]string{"env": "environment"}},
	"POST /dashboard/:env/keys":                              {public: dashPublic, params: map[string]string{"env": "environment"}},
	"POST /dashboard/:env/keys/:keyId/revoke":                {public: dashPublic, params: map[string]string{"env": "environment", "keyId": "keyId"}},
	"GET /dashboard/:env/allowlist":                          {public: dashPublic, params: map[string]string{"env": "environment"}},
	"POST /dashboard/:env/allowlist":                         {public: dashPublic, params: map[string]string{"env": "environment"}},
	"GET /dashboard/:env/ledger.csv":                         {public: dashPublic, params: map[string]string{"env": "environment"}},
	"echo_route_not_found /dashboard":                        {public: "the dashboard's not-found handler"},
	"echo_route_not_found /dashboard/*":                      {public: "the dashboard's not-found handler"},
	"GET /docs/redoc.standalone.js":                          {public: "the API reference's renderer, served from the binary"},
}

// TestTenancyMatrixCoversEveryRoute: every route the server registers has
// a row, and every row a route.
func TestTenancyMatrixCoversEveryRoute(t *testing.T) {
	s := New(Config{}, Deps{})
	registered := map[string]bool{}
	for _, r := range s.Echo().Routes() {
		registered[r.Method+" "+r.Path] = true
	}
	var missing, stale []string
	for rt := range registered {
		if _, ok := tenancyMatrix[rt]; !ok {
			missing = append(missing, rt)
		}
	}
	for rt := range tenancyMatrix {
		if !registered[rt] {
			stale = append(stale, rt)
		}
	}
	sort.Strings(missing)
	sort.Strings(stale)
	if len(missing) > 0 {
		t.Errorf("routes without a row in tenancyMatrix (add one line each):\n  %s", strings.Join(missing, "\n  "))
	}
	if len(stale) > 0 {
		t.Errorf("rows of tenancyMatrix for no registered route:\n  %s", strings.Join(stale, "\n  "))
	}
}

// tenant is one merchant environment's data, as the attacks use it.
type tenant struct {
	name   string
	host   string
	sa     string
	ids    map[string]string // id kind -> value
	seller string            // customers the tenant acts for
	buyer  string
	// markers are strings only this tenant's data contains: a response to
	// another tenant containing one (that its request did not send) leaks.
	markers []string
}

// setUpTenant creates a tenant's customers, category, escrow (paid where
// the environment allows top-ups), whitelist address and an intent.
func setUpTenant(t *testing.T, h *harness, name string, m *tenantKeys, n int) *tenant {
	t.Helper()
	tn := &tenant{name: name, host: m.host, sa: m.sa, ids: map[string]string{}}
	do := func(r req) resp {
		r.host, r.key = m.host, m.sa
		if r.method == "" {
			r.method = "GET"
		}
		return h.do(r)
	}
	tag := fmt.Sprintf("%s%d", strings.ReplaceAll(name, " ", ""), n)
	phone := func(i int) string { return fmt.Sprintf("0803%07d", n*10+i) }
	mk := func(i int) string {
		email := fmt.Sprintf("%s-%d@victim.example", tag, i)
		r := do(req{method: "POST", path: "/v1/customer/create", body: customerBody(email, phone(i))}).expect(t, 201, "")
		tn.markers = append(tn.markers, email)
		return r.obj()["customerId"].(string)
	}
	tn.seller, tn.buyer = mk(1), mk(2)
	tn.ids["customerId"], tn.ids["phone"], tn.ids["email"] = tn.seller, phone(1), fmt.Sprintf("%s-1@victim.example", tag)
	cat := do(req{method: "POST", path: "/v1/escrow/category/create", body: catBody("Cat " + tag)}).expect(t, 201, "")
	tn.ids["categoryId"], tn.ids["categoryName"] = cat.obj()["id"].(string), "Cat "+tag
	esc := do(req{method: "POST", path: "/v1/escrow/create", cid: tn.seller, body: map[string]any{"amount": 5000,
		"purpose": "Purpose " + tag, "whoPays": "buyer", "categoryId": tn.ids["categoryId"]}}).expect(t, 201, "").obj()
	tn.ids["escrowId"], tn.ids["paymentToken"] = esc["id"].(string), esc["paymentToken"].(string)
	tn.ids["reference"] = "ref-" + tag
	if m.env == domain.Test {
		do(req{method: "POST", path: "/v1/payment/topup", cid: tn.buyer, body: map[string]any{"amount": 10000}}).expect(t, 200, "")
		do(req{method: "POST", path: "/v1/payment/escrow", cid: tn.buyer, body: map[string]any{"amount": 5125,
			"reference": tn.ids["reference"], "transactionType": "escrow", "gateway": "wallet",
			"escrowDetails": map[string]any{"escrowId": tn.ids["escrowId"]}}}).expect(t, 200, "")
	} // live has no test top-up and no payment provider here: the escrow stays unpaid
	tn.ids["address"] = bscAddr(100 + n)
	wl := do(req{method: "POST", path: "/v1/whitelist-address", cid: tn.buyer, body: whitelistBody(tn.ids["address"])}).expect(t, 201, "")
	tn.ids["addressId"] = wl.obj()["id"].(string)
	tn.ids["deliveryId"] = "00000000-0000-7000-8000-00000000000" + fmt.Sprint(n)
	tn.ids["fileName"] = "none.png"
	tn.ids["environment"] = "test"
	// Dashboard ids: well-formed, of nothing the attacker can reach.
	tn.ids["keyId"] = fmt.Sprintf("key_00000000-0000-7000-8000-00000000000%d", n)
	tn.ids["userId"] = fmt.Sprintf("usr_victim%d", n)
	tn.ids["setupToken"] = fmt.Sprintf("AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA%d", n)
	owner := m.merchantID
	if owner == "" {
		owner = h.m.MerchantID
	}
	tn.ids["fileOwner"] = files.Owner(owner, string(m.env))
	// Until the victims have milestone escrows, a well-formed id of none.
	tn.ids["milestoneId"] = "00000000-0000-7000-8000-0000000000a" + fmt.Sprint(n)
	tn.ids["webhookURL"] = m.webhookURL
	// Until the victims open checkout sessions, a well-formed id of none.
	tn.ids["checkoutId"] = "cs_AAAAAAAAAAAAAAAAAAAAAAAAA" + fmt.Sprint(n)
	if m.webhookURL != "" {
		do(req{method: "PUT", path: "/v1/merchant/webhook", body: map[string]any{"url": m.webhookURL}}).expect(t, 200, "")
	}
	for _, k := range []string{"customerId", "categoryId", "escrowId", "paymentToken", "reference", "address", "addressId", "categoryName"} {
		tn.markers = append(tn.markers, tn.ids[k])
	}
	tn.markers = append(tn.markers, tn.buyer, phone(2), "Purpose "+tag)
	if m.merchantID != "" {
		tn.markers = append(tn.markers, m.merchantID)
	}
	return tn
}

type tenantKeys struct {
	env        domain.Environment
	host, sa   string
	merchantID string // a marker: "" when the attacker shares it
	webhookURL string
}

// TestTenancyMatrix runs every row's attacks from the harness merchant's
// test environment against another merchant (same environment) and
// against its own live environment.
func TestTenancyMatrix(t *testing.T) {
	rc := newHookReceiver(t, "", 0)
	h := newWebhookHarness(t)
	other := h.newMerchant(true)
	attacker := setUpTenant(t, h, "attacker", &tenantKeys{env: domain.Test, sa: h.sa()}, 1)
	victims := []*tenant{
		setUpTenant(t, h, "other merchant", &tenantKeys{env: domain.Test, sa: key(other, domain.Test, merchant.SuperAdmin),
			merchantID: other.MerchantID, webhookURL: rc.srv.URL + "/other"}, 2),
		setUpTenant(t, h, "own live environment", &tenantKeys{env: domain.Live, host: liveHost,
			sa: key(h.m, domain.Live, merchant.SuperAdmin)}, 3),
	}
	// The other merchant's deliveries exist once its events are announced.
	deadline := time.Now().Add(15 * time.Second)
	for victims[0].ids["deliveryId"] == "" || strings.HasPrefix(victims[0].ids["deliveryId"], "00000000") {
		l := h.do(req{path: "/v1/merchant/webhook/deliveries", key: victims[0].sa}).expect(t, 200, "").obj()["data"].([]any)
		if len(l) > 0 {
			victims[0].ids["deliveryId"] = l[0].(map[string]any)["id"].(string)
			victims[0].markers = append(victims[0].markers, victims[0].ids["deliveryId"])
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the other merchant has no webhook delivery")
		}
		time.Sleep(50 * time.Millisecond)
	}
	before := victimState(t, h, victims)
	// What the attacker has sent so far, per victim: its own data may then
	// hold the victim's strings (a category it named alike), which is no
	// leak.
	sentSoFar := map[*tenant]*strings.Builder{}
	for _, v := range victims {
		sentSoFar[v] = &strings.Builder{}
	}

	fresh := 0
	routes := make([]string, 0, len(tenancyMatrix))
	for rt := range tenancyMatrix {
		routes = append(routes, rt)
	}
	sort.Strings(routes)
	for _, rt := range routes {
		row := tenancyMatrix[rt]
		method, path, _ := strings.Cut(rt, " ")
		for _, v := range victims {
			fill := func(s string) string {
				// The attacker's own new customers get phones of their own:
				// one with the victim's phone would receive the transfers
				// the matrix aims at the victim.
				for strings.Contains(s, "{{freshPhone}}") {
					fresh++
					s = strings.Replace(s, "{{freshPhone}}", fmt.Sprintf("0907%07d", fresh), 1)
				}
				for k, id := range v.ids {
					s = strings.ReplaceAll(s, "{{"+k+"}}", id)
				}
				return s
			}
			target := path
			for _, seg := range strings.Split(path, "/") {
				if p, ok := strings.CutPrefix(seg, ":"); ok {
					kind := paramKinds[p]
					if k, ok := row.params[p]; ok {
						kind = k
					}
					if kind == "" || v.ids[kind] == "" {
						t.Fatalf("%s: no victim id for :%s (name its kind in the row's params, or give setUpTenant one)", rt, p)
					}
					target = strings.Replace(target, seg, v.ids[kind], 1)
				}
			}
			if row.query != "" {
				target += "?" + fill(row.query)
			}
			bodies := row.bodies
			if len(bodies) == 0 {
				bodies = []string{""}
			}
			for _, rawBody := range bodies {
				body := fill(rawBody)
				own := map[string]string{"seller": attacker.seller, "buyer": attacker.buyer}[row.cid]
				variants := []struct {
					what, cid string
					forbid    bool
				}{
					{"own customer-id, the victim's ids", own, !row.mayPass},
					{"the victim's customer-id", v.buyer, !(row.mayPass && row.ignoresCID)},
				}
				if row.public != "" {
					variants = variants[:1]
				}
				for _, vr := range variants {
					name := fmt.Sprintf("%s, %s: %s", rt, v.name, vr.what)
					r := req{method: method, path: target, key: attacker.sa, cid: vr.cid}
					if row.public != "" {
						r.key, r.document = "", rt == "GET /openapi.json"
					}
					if body != "" {
						r.body = body
					}
					res := h.do(r)
					switch {
					case res.Status >= 500:
						t.Errorf("%s: %d %s", name, res.Status, res.Raw)
					case vr.forbid && row.public == "" && res.Status < 400:
						t.Errorf("%s: %d, want 4xx: %s", name, res.Status, res.Raw)
					}
					sentSoFar[v].WriteString(target + body + vr.cid)
					sent := sentSoFar[v].String()
					for _, mk := range v.markers {
						if row.showsItsTarget && strings.HasPrefix(mk, "Purpose ") {
							continue // the escrow's own terms, which the route exists to show
						}
						if mk != "" && strings.Contains(string(res.Raw), mk) && !strings.Contains(sent, mk) {
							t.Errorf("%s: the answer leaks %q: %s", name, mk, res.Raw)
						}
					}
				}
			}
		}
	}
	if after := victimState(t, h, victims); after != before {
		t.Errorf("a victim's data changed under the attacks:\nbefore %s\nafter  %s", before, after)
	}
}

// victimState is what the victims themselves read of their data: it must
// not change under the attacks.
func victimState(t *testing.T, h *harness, victims []*tenant) string {
	t.Helper()
	var b strings.Builder
	for _, v := range victims {
		get := func(path, cid string) string {
			r := h.do(req{method: "GET", path: path, key: v.sa, host: v.host, cid: cid})
			if r.Status != http.StatusOK {
				t.Fatalf("%s reads %s: %d %s", v.name, path, r.Status, r.Raw)
			}
			return string(r.Raw)
		}
		for _, p := range []string{"/v1/customer/get/" + v.seller, "/v1/customer/get/" + v.buyer,
			"/v1/escrow/category/get/" + v.ids["categoryId"], "/v1/merchant/webhook"} {
			b.WriteString(get(p, ""))
		}
		b.WriteString(get("/v1/escrow/verify/"+v.ids["paymentToken"], v.seller))
		b.WriteString(get("/v1/wallet", v.buyer))
		b.WriteString(get("/v1/whitelist-address", v.buyer))
	}
	return b.String()
}
