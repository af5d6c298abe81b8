package chaos

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"io"
	"math/rand/v2"
	"mime/multipart"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/escrowd/escrowd/internal/pgtest"
)

var (
	instancesDuration = flag.Duration("instances.duration", 6*time.Second, "how long TestThreeInstances' workload runs (make chaos: minutes)")
	instancesWorkers  = flag.Int("instances.workers", 4, "TestThreeInstances' concurrent operations")
)

// TestThreeInstances: three `escrowd serve` processes on one database
// behind a round-robin proxy (proxy_test.go) take a mixed workload: escrows
// with images (some deleted again), disputes with evidence, payouts,
// transfers and their webhooks, while one instance, picked at random, is
// killed with SIGKILL and restarted, twice (more in a long run). Then: the
// proxy found an answer for every request among the survivors; every
// stored file is served, byte for byte, by every instance, and the files of
// deleted escrows by none; the money is what was acknowledged; and
// `escrowd audit` finds nothing.
func TestThreeInstances(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three escrowd processes")
	}
	s := *seed
	if s == 0 {
		s = uint64(time.Now().UnixNano())
	}
	long := *instancesDuration >= 2*time.Minute
	t.Logf("instances: seed %d, workload %s, %d workers", s, *instancesDuration, *instancesWorkers)
	rng := rand.New(rand.NewPCG(s, 3))
	db := pgtest.NewURL(t)
	root := t.TempDir()
	began := time.Now()
	bin, err := buildEscrowd(root)
	if err != nil {
		t.Fatal(err)
	}
	px, err := startProxy()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(px.close)
	f := newFleet(t, bin, root, db)
	f.publicURL = px.url // file URLs name the balancer, as in production
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("instance logs (last lines):\n%s", f.logTails(15))
		}
	})
	rcv, err := startReceiver(s, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rcv.close)
	var merchants []*merchantKeys
	for i := range 2 {
		m, err := createMerchant(f, fmt.Sprintf("instances-%d", i))
		if err == nil {
			_, err = f.cli("merchant", "set-webhook", "--merchant", m.id, "--env", "test", "--url", rcv.url+"/hook/"+m.id)
		}
		if err != nil {
			t.Fatal(err)
		}
		rcv.addMerchant(m.id, m.secret)
		merchants = append(merchants, m)
	}
	for range 3 {
		f.add("api,projector,webhooks")
	}
	px.backends = f.apiAddrs()
	if err := f.waitReady(90 * time.Second); err != nil {
		t.Fatal(err)
	}
	t.Logf("instances: set up in %s", time.Since(began).Round(100*time.Millisecond))

	// A request without a final answer is retried with its key; one still
	// without after retryFor is given up as unknown. Long runs wait out
	// the 2-minute takeover of a key whose request died with its instance.
	retryFor := 5 * time.Second
	if long {
		retryFor = 150 * time.Second
	}
	c := newClient([]string{strings.TrimPrefix(px.url, "http://")}, 10*time.Second, retryFor)
	up := &uploads{live: map[string][]byte{}, gone: map[string]bool{}}
	w := newWorkload(t, c, merchants)
	w.mix = instanceOps(up)

	kills := 2
	if long {
		kills = max(2, int(*instancesDuration/(30*time.Second)))
	}
	var killed []string
	faults := make(chan struct{})
	go func() {
		defer close(faults)
		start := time.Now()
		for k := 1; k <= kills; k++ {
			time.Sleep(time.Until(start.Add(*instancesDuration * time.Duration(k) / time.Duration(kills+1))))
			i := f.insts[rng.IntN(len(f.insts))]
			killed = append(killed, i.name)
			f.kill9(i, time.Duration(300+rng.IntN(1000))*time.Millisecond)
		}
	}()
	w.run(*instancesWorkers, s, *instancesDuration)
	<-faults
	if err := f.waitReady(90 * time.Second); err != nil {
		t.Fatal(err)
	}
	t.Logf("instances: workload done after %s; killed %s", time.Since(began).Round(100*time.Millisecond), strings.Join(killed, ", "))

	ctx := context.Background()
	pool, err := pgxpool.New(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	k := &checker{f: f, c: newClient(f.apiAddrs(), 10*time.Second, 60*time.Second), pool: pool, w: w, rcv: rcv, rng: rng, sealer: f.sealer(pool)}
	v := &verdict{}
	if _, err := k.caughtUp(90 * time.Second); err != nil {
		v.fail("projectors not caught up: %v", err)
	}
	answeredBySurvivors(v, px, c, w)
	up.servedByEvery(v, f, px.url)
	k.balances(v)
	k.records(ctx, v)
	k.customers(ctx, v)
	k.ledgerSums(ctx, v)
	k.audits(v)
	instanceWebhooks(ctx, v, k, long)
	for _, l := range v.lines {
		t.Log(l)
	}
	for _, msg := range v.violations {
		t.Error("VIOLATION:", msg)
	}
	t.Logf("instances: %d operations, %d requests through the proxy, finished after %s",
		len(w.ops), px.requests.Load(), time.Since(began).Round(100*time.Millisecond))
}

// answeredBySurvivors checks that the proxy found a live instance to
// answer every request, that some requests did meet a dead one (or the
// run proved nothing), and that what the workload gave up on was answered
// all the same: 409 in progress, the key of a request that died with its
// instance, until the takeover.
func answeredBySurvivors(v *verdict, px *proxy, c *client, w *workload) {
	if n := px.unanswered.Load(); n > 0 {
		px.mu.Lock()
		v.fail("the proxy found no instance to answer %d requests: %s", n, strings.Join(px.unansweredLog, "; "))
		px.mu.Unlock()
	}
	if px.passedOver.Load() == 0 {
		v.fail("no request met a killed instance: the run proves too little")
	}
	px.mu.Lock()
	if len(px.byBackend) != len(px.backends) {
		v.fail("answers per instance %v: every instance should have answered", px.byBackend)
	}
	v.say("proxy: %d requests, %d answered (per instance %v), %d attempts passed over a dead instance for the next",
		px.requests.Load(), px.answered.Load(), px.byBackend, px.passedOver.Load())
	px.mu.Unlock()
	if busy, all := c.gaveUpBusy.Load(), c.gaveUp.Load(); all != busy {
		v.fail("%d requests had no final answer, %d of them not even 409 in progress", all, all-busy)
	} else if all > 0 {
		v.say("%d requests still 409 in progress when the workload gave up on them (a key held by a killed instance)", all)
	}
	for _, p := range w.ops {
		for _, a := range p.anomalies {
			v.fail("unexpected refusal: %s", a)
		}
	}
}

// uploads are the files the workload stored and what became of them.
type uploads struct {
	mu   sync.Mutex
	live map[string][]byte // URL -> the bytes uploaded
	gone map[string]bool   // URLs of escrows whose deletion was answered
}

func (u *uploads) add(url string, data []byte) {
	u.mu.Lock()
	u.live[url] = data
	u.mu.Unlock()
}

// removed: the escrow showing urls was deleted (gone) or may have been
// (neither: not checked).
func (u *uploads) removed(urls []string, surely bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	for _, url := range urls {
		delete(u.live, url)
		if surely {
			u.gone[url] = true
		}
	}
}

// servedByEvery fetches every file from every instance directly.
func (u *uploads) servedByEvery(v *verdict, f *fleet, publicURL string) {
	client := &http.Client{Timeout: 10 * time.Second}
	get := func(addr, url string) (int, string, []byte, error) {
		res, err := client.Get("http://" + addr + strings.TrimPrefix(url, publicURL))
		if err != nil {
			return 0, "", nil, err
		}
		defer res.Body.Close()
		body, err := io.ReadAll(res.Body)
		return res.StatusCode, res.Header.Get("Content-Type"), body, err
	}
	evidence := 0
	for url, data := range u.live {
		want := http.DetectContentType(data)
		if want == "application/pdf" {
			evidence++
		}
		for _, i := range f.insts {
			st, ct, body, err := get(i.addr, url)
			if err != nil || st != http.StatusOK || ct != want || !bytes.Equal(body, data) {
				v.fail("files: %s from %s: %d %s, %d bytes of %d (%v)", url, i.name, st, ct, len(body), len(data), err)
			}
		}
	}
	for url := range u.gone {
		for _, i := range f.insts {
			if st, _, _, err := get(i.addr, url); err != nil || st != http.StatusNotFound {
				v.fail("files: %s of a deleted escrow from %s: %d (%v), want 404", url, i.name, st, err)
			}
		}
	}
	if len(u.live) == 0 || evidence == 0 {
		v.fail("files: %d stored, %d of them PDF evidence: the run proves too little", len(u.live), evidence)
	}
	v.say("files: %d (%d PDF evidence) served byte for byte by each of %d instances; %d of deleted escrows served by none",
		len(u.live), evidence, len(f.insts), len(u.gone))
}

// instanceWebhooks: every delivery the outbox counts as delivered reached
// the receiver with a valid signature, and none arrived with a bad one. A
// dispatcher killed mid-attempt holds its delivery's lease for a minute:
// a short run reports what is still pending, a long one waits for it.
func instanceWebhooks(ctx context.Context, v *verdict, k *checker, long bool) {
	wait := 5 * time.Second
	if long {
		wait = 90 * time.Second
	}
	deadline := time.Now().Add(wait)
	for {
		var total, delivered, pending int
		var unreceived []string
		rows, err := k.pool.Query(ctx, `SELECT id::text, status FROM webhook_deliveries WHERE environment = 'test'`)
		if err != nil {
			v.fail("webhooks: %v", err)
			return
		}
		for rows.Next() {
			var id, status string
			if err := rows.Scan(&id, &status); err != nil {
				v.fail("webhooks: %v", err)
				break
			}
			total++
			switch status {
			case "delivered":
				delivered++
				if k.rcv.received(id) == 0 {
					unreceived = append(unreceived, id)
				}
			case "pending", "delivering":
				pending++
			default:
				v.fail("webhooks: delivery %s is %s", id, status)
			}
		}
		rows.Close()
		if (pending == 0 && len(unreceived) == 0) || time.Now().After(deadline) {
			for _, id := range unreceived {
				v.fail("webhooks: delivery %s delivered but never received with a valid signature", id)
			}
			if delivered == 0 {
				v.fail("webhooks: none delivered of %d", total)
			}
			if pending > 0 && long {
				v.fail("webhooks: %d of %d still pending after %s", pending, total, wait)
			}
			v.say("webhooks: %d messages, %d delivered with a valid signature, %d pending behind a killed dispatcher's lease", total, delivered, pending)
			break
		}
		time.Sleep(300 * time.Millisecond)
	}
	k.rcv.mu.Lock()
	for _, b := range k.rcv.badSigs {
		v.fail("webhooks: bad signature: %.200s", b)
	}
	k.rcv.mu.Unlock()
}

// instanceOps is TestThreeInstances' mix: the operations that store
// files, and the payouts and money moves beside them.
func instanceOps(up *uploads) []operation {
	return []operation{
		{"escrow with images", 3, func(p *op) { opImagesEscrow(p, up) }},
		{"dispute with evidence", 2, func(p *op) { opEvidenceDispute(p, up) }},
		{"withdrawal", 2, opWithdrawal},
		{"failing withdrawal", 1, opFailingWithdrawal},
		{"escrow confirm", 1, opEscrowConfirm},
		{"transfer", 1, opTransfer},
	}
}

// opImagesEscrow creates an escrow with two images; one in three is
// deleted again, which removes its images.
func opImagesEscrow(p *op, up *uploads) {
	seller, _ := p.customer(0)
	if seller == "" {
		return
	}
	imgs := [][]byte{uniquePNG(p.rng), uniquePNG(p.rng)}
	body, ct := multipartFiles(map[string]string{"amount": "10000", "purpose": "Phone", "whoPays": "buyer",
		"maxDelivery": "1", "deliveryTimeline": "days"}, "imageUrl", imgs...)
	r, ok := p.step(call{method: http.MethodPost, path: "/v1/escrow/create", key: p.m.std, cid: seller, body: body, contentType: ct}, nil)
	if !ok || r.outcome != acked {
		return
	}
	e := r.obj()
	raw, _ := e["imageUrl"].([]any)
	if len(raw) != len(imgs) {
		p.anomalies = append(p.anomalies, fmt.Sprintf("%s: created with images %v", p.name, raw))
		return
	}
	urls := make([]string, len(raw))
	for i, u := range raw {
		urls[i], _ = u.(string)
		up.add(urls[i], imgs[i])
	}
	if p.rng.IntN(3) != 0 {
		return
	}
	token, _ := e["paymentToken"].(string)
	r, ok = p.step(call{method: http.MethodDelete, path: "/v1/escrow/delete/" + token, key: p.m.std, cid: seller}, nil)
	up.removed(urls, ok)
}

// opEvidenceDispute: the buyer of a paid escrow disputes it with a
// photo, the seller answers with a PDF, the merchant refunds the buyer.
func opEvidenceDispute(p *op, up *uploads) {
	id, token, buyer, seller, ok := p.paidEscrow("days")
	if !ok {
		return
	}
	for _, party := range []struct {
		cid  string
		file []byte
	}{{buyer, uniquePNG(p.rng)}, {seller, uniquePDF(p.rng)}} {
		body, ct := multipartFiles(map[string]string{"message": "not as described"}, "file", party.file)
		r, ok := p.step(call{method: http.MethodPost, path: "/v1/escrow/submit-dispute/" + token, key: p.m.std, cid: party.cid,
			body: body, contentType: ct}, nil)
		if !ok {
			return
		}
		if r.outcome == acked {
			entries, _ := r.obj()["dispute"].([]any)
			var proof string
			if len(entries) > 0 {
				last, _ := entries[len(entries)-1].(map[string]any)
				proof, _ = last["proofUrl"].(string)
			}
			if proof == "" {
				p.anomalies = append(p.anomalies, fmt.Sprintf("%s: dispute entries %v without the evidence", p.name, entries))
				return
			}
			up.add(proof, party.file)
		}
	}
	p.step(p.std("POST", "/v1/escrow/dispute/resolve/"+id, "", map[string]any{"status": "REFUNDED", "resolution": "refunded"}),
		p.settled(buyer, seller, 0, 10000))
}

// multipartFiles is a multipart body of fields and files under field.
func multipartFiles(fields map[string]string, field string, files ...[]byte) ([]byte, string) {
	var buf bytes.Buffer
	w := multipart.NewWriter(&buf)
	for k, v := range fields {
		_ = w.WriteField(k, v)
	}
	for i, data := range files {
		fw, _ := w.CreateFormFile(field, fmt.Sprintf("upload-%d", i))
		_, _ = fw.Write(data)
	}
	_ = w.Close()
	return buf.Bytes(), w.FormDataContentType()
}

// uniquePNG is a 2x2 PNG of random colours: every upload's bytes differ.
func uniquePNG(rng *rand.Rand) []byte {
	img := image.NewRGBA(image.Rect(0, 0, 2, 2))
	for x := range 2 {
		for y := range 2 {
			img.Set(x, y, color.RGBA{R: uint8(rng.IntN(256)), G: uint8(rng.IntN(256)), B: uint8(rng.IntN(256)), A: 255})
		}
	}
	var b bytes.Buffer
	_ = png.Encode(&b, img)
	return b.Bytes()
}

// uniquePDF is a minimal PDF with a random comment.
func uniquePDF(rng *rand.Rand) []byte {
	return fmt.Appendf(nil, "%%PDF-1.4\n%% %016x\n1 0 obj << /Type /Catalog >> endobj\ntrailer << /Root 1 0 R >>\n%%%%EOF\n", rng.Uint64())
}
