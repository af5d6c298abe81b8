package chaos

import (
	"encoding/json"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/escrowd/escrowd/webhooks"
)

// receiver is the merchants' webhook endpoint: it verifies every
// signature and, on a message's first attempt, sometimes hangs past the
// dispatcher's timeout, answers 500 or closes the connection, so every
// message it gets right has been retried through a fault some of the time.
type receiver struct {
	srv     *http.Server
	url     string
	faultP  float64 // probability of a fault on a first attempt
	mu      sync.Mutex
	rng     *rand.Rand
	secrets map[string]string // merchant -> test signing secret
	// got is every message id received with a valid signature, with the
	// number of such deliveries.
	got     map[string]int
	badSigs []string
	hangs   int
	errors  int
	closes  int
}

func startReceiver(seed uint64, faultP float64) (*receiver, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	r := &receiver{faultP: faultP, rng: rand.New(rand.NewPCG(seed, 23)), secrets: map[string]string{}, got: map[string]int{}}
	r.url = "http://" + l.Addr().String()
	r.srv = &http.Server{Handler: r, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = r.srv.Serve(l) }()
	return r, nil
}

func (r *receiver) close() { _ = r.srv.Close() }

func (r *receiver) addMerchant(id, secret string) {
	r.mu.Lock()
	r.secrets[id] = secret
	r.mu.Unlock()
}

func (r *receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	merchantID := strings.TrimPrefix(req.URL.Path, "/hook/")
	body, err := io.ReadAll(req.Body)
	if err != nil {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	r.mu.Lock()
	secret := r.secrets[merchantID]
	fault := -1
	if req.Header.Get(webhooks.AttemptHeader) == "1" && r.rng.Float64() < r.faultP {
		fault = r.rng.IntN(3)
		switch fault {
		case 0:
			r.hangs++
		case 1:
			r.errors++
		case 2:
			r.closes++
		}
	}
	r.mu.Unlock()
	switch fault {
	case 0: // hang past the dispatcher's 10 s timeout
		select {
		case <-req.Context().Done():
		case <-time.After(15 * time.Second):
		}
		return
	case 1:
		w.WriteHeader(http.StatusInternalServerError)
		return
	case 2:
		if hj, ok := w.(http.Hijacker); ok {
			if conn, _, err := hj.Hijack(); err == nil {
				conn.Close()
				return
			}
		}
		w.WriteHeader(http.StatusBadGateway)
		return
	}
	var env webhooks.Envelope
	valid := secret != "" && webhooks.Verify(secret, body, req.Header.Get(webhooks.SignatureHeader)) && json.Unmarshal(body, &env) == nil
	r.mu.Lock()
	if valid {
		r.got[env.ID]++
	} else {
		r.badSigs = append(r.badSigs, merchantID+": "+string(body))
	}
	r.mu.Unlock()
	if !valid {
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	w.WriteHeader(http.StatusOK)
}

func (r *receiver) faults() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.hangs + r.errors + r.closes
}

func (r *receiver) received(id string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.got[id]
}
