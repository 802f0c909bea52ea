package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync"
	"time"
)

// loadResult summarises one closed-loop load run.
type loadResult struct {
	Requests int
	Errors   int
	Elapsed  time.Duration
	P50, P99 time.Duration
}

func (r loadResult) RPS() float64 { return float64(r.Requests) / r.Elapsed.Seconds() }

func (r loadResult) String() string {
	return fmt.Sprintf("%8.0f req/s   p50 %6.2f ms   p99 %6.2f ms   errors %d",
		r.RPS(), float64(r.P50.Microseconds())/1000, float64(r.P99.Microseconds())/1000, r.Errors)
}

// closedLoop runs `clients` goroutines that each send the next request as soon as
// the previous one is answered, for the duration.
func closedLoop(ctx context.Context, clients int, duration time.Duration, newRequest func() *http.Request) loadResult {
	transport := &http.Transport{MaxIdleConns: clients * 2, MaxIdleConnsPerHost: clients * 2, DisableCompression: true}
	defer transport.CloseIdleConnections()
	client := &http.Client{Transport: transport, Timeout: 10 * time.Second}

	ctx, cancel := context.WithTimeout(ctx, duration)
	defer cancel()
	var (
		mu        sync.Mutex
		latencies []time.Duration
		errors    int
		wg        sync.WaitGroup
	)
	start := time.Now()
	for i := 0; i < clients; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []time.Duration
			var failed int
			for ctx.Err() == nil {
				t0 := time.Now()
				res, err := client.Do(newRequest())
				if err == nil {
					_, _ = io.Copy(io.Discard, res.Body)
					res.Body.Close()
					if res.StatusCode != http.StatusOK {
						err = fmt.Errorf("status %d", res.StatusCode)
					}
				}
				if err != nil {
					if ctx.Err() == nil {
						failed++
					}
					continue
				}
				mine = append(mine, time.Since(t0))
			}
			mu.Lock()
			latencies = append(latencies, mine...)
			errors += failed
			mu.Unlock()
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	slices.Sort(latencies)
	r := loadResult{Requests: len(latencies), Errors: errors, Elapsed: elapsed}
	if n := len(latencies); n > 0 {
		r.P50 = latencies[n*50/100]
		r.P99 = latencies[n*99/100]
	}
	return r
}
