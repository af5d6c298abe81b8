package paystacksim

import (
	"encoding/json"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"time"

	"github.com/escrowd/escrowd/internal/paystack"
)

// The control API, for driving the simulator from another process. Every
// route but the checkout page takes the secret key as a bearer token and
// JSON bodies; it answers {"status": true, "data": …} or
// {"status": false, "message": …}.
//
//	POST /_sim/dedicated-account-payments  {"account_number", "amount"}  → {"reference"}
//	POST /_sim/checkouts/{reference}/complete  {"channel", "ok"}
//	POST /_sim/transfers/{reference}/settle  {"status"}
//	POST /_sim/auto-settle  {"status", "after_ms"}
//	POST /_sim/faults  {"kind": "fail"|"delay"|"drop", "op", "http_status", "delay_ms", "n"}
//	POST /_sim/events/mode  {"duplicate": bool, "suppress": bool}  (either may be left out)
//	POST /_sim/events/forge-next
//	POST /_sim/events/lie-next  {"status", "amount"}
//	GET  /_sim/events | /_sim/transactions | /_sim/transfers | /_sim/balance
//
// GET /_sim/checkout/{access_code} is the payer's checkout page (the
// authorization_url of an initialized transaction); its buttons post back
// to it and redirect to the callback_url with ?reference=…&trxref=….
func (s *Sim) controlRoutes() {
	s.mux.HandleFunc("GET /_sim/checkout/{code}", s.checkoutPage)
	s.mux.HandleFunc("POST /_sim/checkout/{code}", s.checkoutSubmit)
	ctl := func(pattern string, h func(r *http.Request) (any, error)) {
		s.mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
			if !s.authorized(r) {
				writeError(w, http.StatusUnauthorized, "Invalid key", "", "")
				return
			}
			data, err := h(r)
			if err != nil {
				writeError(w, http.StatusBadRequest, err.Error(), "", "")
				return
			}
			writeJSON(w, "ok", data, nil)
		})
	}
	ctl("POST /_sim/dedicated-account-payments", func(r *http.Request) (any, error) {
		var in struct {
			AccountNumber string `json:"account_number"`
			Amount        int64  `json:"amount"`
		}
		if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
			return nil, err
		}
		ref, err := s.PayIntoDedicatedAccount(in.AccountNumber, in.Amount)
		return map[string]string{"reference": ref}, err
	})
	ctl("POST /_sim/checkouts/{ref}/complete", func(r *http.Request) (any, error) {
		var in struct {
			Channel string `json:"channel"`
			OK      bool   `json:"ok"`
		}
		if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
			return nil, err
		}
		return nil, s.CompleteCheckout(r.PathValue("ref"), in.Channel, in.OK)
	})
	ctl("POST /_sim/transfers/{ref}/settle", func(r *http.Request) (any, error) {
		var in struct {
			Status string `json:"status"`
		}
		if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
			return nil, err
		}
		return nil, s.SettleTransfer(r.PathValue("ref"), in.Status)
	})
	ctl("POST /_sim/auto-settle", func(r *http.Request) (any, error) {
		var in struct {
			Status  string `json:"status"`
			AfterMS int64  `json:"after_ms"`
		}
		if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
			return nil, err
		}
		return nil, s.AutoSettleTransfers(in.Status, time.Duration(in.AfterMS)*time.Millisecond)
	})
	ctl("POST /_sim/faults", func(r *http.Request) (any, error) {
		var in struct {
			Kind       string `json:"kind"`
			Op         string `json:"op"`
			HTTPStatus int    `json:"http_status"`
			DelayMS    int64  `json:"delay_ms"`
			N          int    `json:"n"`
		}
		if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
			return nil, err
		}
		if in.N <= 0 {
			in.N = 1
		}
		switch in.Kind {
		case "fail":
			if in.HTTPStatus < 400 || in.HTTPStatus > 599 {
				return nil, errString("http_status must be a 4xx or 5xx")
			}
			s.FailNext(in.Op, in.HTTPStatus, in.N)
		case "delay":
			s.DelayNext(in.Op, time.Duration(in.DelayMS)*time.Millisecond, in.N)
		case "drop":
			s.DropAnswer(in.Op, in.N)
		default:
			return nil, errString(`kind must be "fail", "delay" or "drop"`)
		}
		return nil, nil
	})
	ctl("POST /_sim/events/mode", func(r *http.Request) (any, error) {
		var in struct {
			Duplicate *bool `json:"duplicate"`
			Suppress  *bool `json:"suppress"`
		}
		if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
			return nil, err
		}
		if in.Duplicate != nil {
			s.DuplicateEvents(*in.Duplicate)
		}
		if in.Suppress != nil {
			s.SuppressEvents(*in.Suppress)
		}
		return nil, nil
	})
	ctl("POST /_sim/events/forge-next", func(*http.Request) (any, error) { s.ForgeNextEvent(); return nil, nil })
	ctl("POST /_sim/events/lie-next", func(r *http.Request) (any, error) {
		var in struct {
			Status string `json:"status"`
			Amount int64  `json:"amount"`
		}
		if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
			return nil, err
		}
		s.LieInNextEvent(in.Status, in.Amount)
		return nil, nil
	})
	ctl("GET /_sim/events", func(*http.Request) (any, error) {
		type view struct {
			Seq        int             `json:"seq"`
			Event      string          `json:"event"`
			Body       json.RawMessage `json:"body"`
			Forged     bool            `json:"forged"`
			Lie        bool            `json:"lie"`
			Suppressed bool            `json:"suppressed"`
			Statuses   []int           `json:"statuses"`
			Delivered  bool            `json:"delivered"`
			Done       bool            `json:"done"`
		}
		out := []view{}
		for _, d := range s.Events() {
			out = append(out, view{d.Seq, d.Event, d.Body, d.Forged, d.Lie, d.Suppressed, d.Statuses, d.Delivered, d.Done})
		}
		return out, nil
	})
	ctl("GET /_sim/transactions", func(*http.Request) (any, error) { return s.Transactions(), nil })
	ctl("GET /_sim/transfers", func(*http.Request) (any, error) { return s.Transfers(), nil })
	ctl("GET /_sim/balance", func(*http.Request) (any, error) { return map[string]int64{"balance": s.Balance()}, nil })
}

type errString string

func (e errString) Error() string { return string(e) }

var checkoutTemplate = template.Must(template.New("checkout").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Paystack simulator checkout</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>body{font-family:sans-serif;max-width:28rem;margin:3rem auto;padding:0 1rem}
button{display:block;width:100%;margin:.5rem 0;padding:.75rem;font-size:1rem}
.fail{background:#fee;border:1px solid #c33}</style></head>
<body><h1>Simulated checkout</h1>
<p>{{.Email}} pays <strong>NGN {{.Naira}}</strong> (reference <code>{{.Reference}}</code>).</p>
{{if .Open}}<form method="post">
{{range .Channels}}<button name="pay" value="{{.}}">Pay with {{.}}</button>{{end}}
<button class="fail" name="fail" value="{{index .Channels 0}}">Fail the payment</button>
</form>{{else}}<p>This transaction is {{.Status}}.</p>{{end}}
<p><small>Paystack simulator: no money moves.</small></p></body></html>`))

func (s *Sim) checkoutPage(w http.ResponseWriter, r *http.Request) {
	t, ok := s.checkoutOf(r.PathValue("code"))
	if !ok {
		http.Error(w, "no such checkout", http.StatusNotFound)
		return
	}
	channels := s.channelsOf(t.AccessCode)
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_ = checkoutTemplate.Execute(w, map[string]any{
		"Email": t.Email, "Reference": t.Reference, "Naira": nairaText(t.Amount), "Status": t.Status,
		"Open": t.Status == "abandoned" && len(channels) > 0, "Channels": channels,
	})
}

func (s *Sim) checkoutSubmit(w http.ResponseWriter, r *http.Request) {
	t, ok := s.checkoutOf(r.PathValue("code"))
	if !ok {
		http.Error(w, "no such checkout", http.StatusNotFound)
		return
	}
	channel, paid := r.PostFormValue("pay"), true
	if channel == "" {
		channel, paid = r.PostFormValue("fail"), false
	}
	s.mu.Lock()
	if tx := s.st.txnByRef[t.Reference]; tx != nil && tx.status == paystack.TransactionAbandoned {
		tx.ipAddress = remoteHost(r) // the payer's browser
	}
	s.mu.Unlock()
	if err := s.CompleteCheckout(t.Reference, channel, paid); err != nil {
		http.Error(w, err.Error(), http.StatusConflict)
		return
	}
	if t.CallbackURL == "" {
		http.Redirect(w, r, r.URL.Path, http.StatusSeeOther)
		return
	}
	u, err := url.Parse(t.CallbackURL)
	if err != nil {
		http.Error(w, "the callback_url is not a URL", http.StatusBadRequest)
		return
	}
	q := u.Query()
	q.Set("trxref", t.Reference)
	q.Set("reference", t.Reference)
	u.RawQuery = q.Encode()
	http.Redirect(w, r, u.String(), http.StatusSeeOther)
}

func nairaText(kobo int64) string {
	return fmt.Sprintf("%d.%02d", kobo/100, kobo%100)
}
