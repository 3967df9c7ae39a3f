package admin

import (
	"sync"
	"time"
)

// rateRing keeps samples of counters, one per status request at most
// every rateSpacing, for as long as the rate window: a rate is the
// difference between the newest sample and the oldest one in the window,
// over the time between them. Requests feed it; no goroutine runs, so
// nothing is left running when the server stops.
type rateRing struct {
	mu      sync.Mutex
	window  time.Duration
	samples []rateSample
}

type rateSample struct {
	at     time.Time
	values map[string]float64
}

// rateSpacing is the least time between two kept samples (it bounds the
// ring to window/rateSpacing samples however often the page is asked).
const rateSpacing = time.Second

func newRateRing(window time.Duration) *rateRing { return &rateRing{window: window} }

// observe records values at now and returns the per-second rate of each
// over the span to the oldest sample of the window (rates nil and span 0
// when there is no earlier sample). A counter that went down has no rate.
func (r *rateRing) observe(now time.Time, values map[string]float64) (rates map[string]float64, span time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	// Keep the samples of the window; when there is none, the newest
	// older one, so that a page asked less often than the window still
	// gets rates (over the longer span it reports).
	var last *rateSample
	keep := r.samples[:0]
	for i := range r.samples {
		s := r.samples[i]
		switch {
		case s.at.After(now):
		case now.Sub(s.at) <= r.window:
			keep = append(keep, s)
		default:
			last = &rateSample{at: s.at, values: s.values}
		}
	}
	if len(keep) == 0 && last != nil {
		keep = append(keep, *last)
	}
	r.samples = keep
	if n := len(r.samples); n == 0 || now.Sub(r.samples[n-1].at) >= rateSpacing {
		r.samples = append(r.samples, rateSample{at: now, values: values})
	}
	old := r.samples[0]
	span = now.Sub(old.at)
	if span < rateSpacing {
		return nil, 0
	}
	rates = make(map[string]float64, len(values))
	for k, v := range values {
		d := v - old.values[k]
		if d >= 0 {
			rates[k] = d / span.Seconds()
		}
	}
	return rates, span
}

// fillRates samples the counters the page shows rates of and sets them.
func (p *statusPage) fillRates(s *Status, now time.Time) {
	values := map[string]float64{}
	for _, a := range s.Accounts {
		values["a/submits/"+a.Name] = a.Submits
		values["a/throttled/"+a.Name] = a.Throttled
	}
	for _, u := range s.Upstreams {
		values["u/requests/"+u.Name] = u.Requests
		values["u/receipts/"+u.Name] = u.Receipts
		values["u/errors/"+u.Name] = u.Errors
	}
	rates, span := p.rates.observe(now, values)
	if rates == nil {
		return
	}
	s.RateSeconds = span.Seconds()
	get := func(k string) *float64 {
		if v, ok := rates[k]; ok {
			return &v
		}
		return nil
	}
	for i := range s.Accounts {
		a := &s.Accounts[i]
		a.SubmitsPerSecond, a.ThrottledPerSecond = get("a/submits/"+a.Name), get("a/throttled/"+a.Name)
	}
	for i := range s.Upstreams {
		u := &s.Upstreams[i]
		u.RequestsPerSecond, u.ReceiptsPerSecond, u.ErrorsPerSecond = get("u/requests/"+u.Name), get("u/receipts/"+u.Name), get("u/errors/"+u.Name)
	}
}
