package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/emersion/go-sasl"
	gosmtp "github.com/emersion/go-smtp"
	"go.temporal.io/sdk/client"

	"github.com/mailyard/mailyard/internal/store"
	"github.com/mailyard/mailyard/internal/submission"
)

// The submission benchmark's sizes.
const (
	submissionConns       = 16
	submissionEmails      = 150
	submissionLatencyRate = 10 // emails per second
	submissionLatencyTime = 15 * time.Second
)

// benchSubmittedMessage is benchEmailRequest as an application writes it.
var benchSubmittedMessage = []byte(strings.ReplaceAll("From: "+benchEmailRequest.From+"\n"+
	"To: "+benchEmailRequest.To[0]+"\n"+
	"Subject: "+benchEmailRequest.Subject+"\n"+
	"MIME-Version: 1.0\n"+
	"Content-Type: text/plain; charset=utf-8\n"+
	"\n"+benchEmailRequest.Text, "\n", "\r\n"))

// measureSubmission runs `mailyard submission`'s server in this process and
// sends benchEmailRequest's message over SMTP: emails per second over
// submissionConns authenticated connections, from the first MAIL FROM to
// the last arrival at the recipients' server, and the time from each
// 250 2.0.0 queued as <id> to the recipients' 250 at a steady rate.
func measureSubmission(ctx context.Context, out io.Writer, st *store.Store, tc client.Client, username, secret string, rcv *arrivals) error {
	discard := slog.New(slog.DiscardHandler)
	b := &submission.Backend{Store: st, Temporal: tc, AllowInsecureAuth: true, Retention: time.Hour, Logger: discard}
	srvCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	ready := make(chan string, 1)
	served := make(chan error, 1)
	go func() {
		served <- b.Serve(srvCtx, submission.Listener{Addr: "127.0.0.1:0"}, func(a, _ string) { ready <- a })
	}()
	var addr string
	select {
	case addr = <-ready:
	case err := <-served:
		return err
	}
	sendAll := func(n int, sent func(id string, at time.Time)) error {
		work := make(chan int)
		errs := make(chan error, submissionConns)
		var wg sync.WaitGroup
		for range submissionConns {
			wg.Go(func() {
				c, err := gosmtp.Dial(addr)
				if err == nil {
					err = c.Auth(sasl.NewPlainClient("", username, secret))
				}
				if err != nil {
					errs <- err
					for range work {
					}
					return
				}
				defer c.Close()
				for range work {
					id, err := submitOne(c)
					if err != nil {
						errs <- err
						continue
					}
					if sent != nil {
						sent(id, time.Now())
					}
				}
				_ = c.Quit()
			})
		}
		for i := range n {
			work <- i
		}
		close(work)
		wg.Wait()
		close(errs)
		return <-errs
	}

	// Warm up, then the saturation run.
	rcv.expect(20)
	if err := sendAll(20, nil); err != nil {
		return err
	}
	if err := rcv.wait(ctx, time.Minute); err != nil {
		return err
	}
	waitIdle(ctx, tc, emailsRunning)
	rcv.expect(submissionEmails)
	start := time.Now()
	if err := sendAll(submissionEmails, nil); err != nil {
		return err
	}
	if err := rcv.wait(ctx, 5*time.Minute); err != nil {
		return fmt.Errorf("submission: %w", err)
	}
	rate := float64(submissionEmails) / time.Since(start).Seconds()
	fmt.Fprintf(out, "SMTP submission, %d emails over %d connections, MAIL FROM → recipients' 250:   %6.1f emails/s\n",
		submissionEmails, submissionConns, rate)

	// Latency at a steady rate: one message every 1/rate s on the same
	// authenticated connections.
	waitIdle(ctx, tc, emailsRunning)
	n := submissionLatencyRate * int(submissionLatencyTime/time.Second)
	rcv.expect(n)
	var mu sync.Mutex
	queued := map[string]time.Time{}
	tick := time.NewTicker(time.Second / submissionLatencyRate)
	defer tick.Stop()
	var wg sync.WaitGroup
	var sendErr error
	for range n {
		<-tick.C
		wg.Go(func() {
			if err := sendAll(1, func(id string, at time.Time) { mu.Lock(); queued[id] = at; mu.Unlock() }); err != nil {
				mu.Lock()
				sendErr = err
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if sendErr != nil {
		return sendErr
	}
	if err := rcv.wait(ctx, 5*time.Minute); err != nil {
		return fmt.Errorf("submission latency: %w", err)
	}
	lat := make([]time.Duration, 0, n)
	for id, at := range queued {
		lat = append(lat, rcv.at(id).Sub(at))
	}
	slices.Sort(lat)
	fmt.Fprintf(out, "latency, %d SMTP emails/s for %s, 250 queued as → recipients' 250:   p50 %4.0f ms   p90 %4.0f ms   p99 %4.0f ms\n",
		submissionLatencyRate, submissionLatencyTime, ms(percentile(lat, 50)), ms(percentile(lat, 90)), ms(percentile(lat, 99)))
	return nil
}

// submitOne sends one message on an authenticated connection and returns
// the email id of the server's 250 2.0.0 queued as <id>.
func submitOne(c *gosmtp.Client) (string, error) {
	if err := c.Mail("billing@"+emailDomain, nil); err != nil {
		return "", err
	}
	if err := c.Rcpt(benchEmailRequest.To[0], nil); err != nil {
		return "", err
	}
	w, err := c.Data()
	if err != nil {
		return "", err
	}
	if _, err := io.Copy(w, bytes.NewReader(benchSubmittedMessage)); err != nil {
		return "", err
	}
	res, err := w.CloseWithResponse()
	if err != nil {
		return "", err
	}
	id, ok := strings.CutPrefix(strings.TrimPrefix(res.StatusText, "2.0.0 "), "queued as ")
	if !ok {
		return "", fmt.Errorf("submission answered %q", res.StatusText)
	}
	return id, nil
}
