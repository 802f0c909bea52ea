package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/mailyard/mailyard/internal/config"
	"github.com/mailyard/mailyard/internal/eventtype"
)

var eventsUsage = `Usage: mailyard events emit --domain NAME --type TYPE [--event-id ID]
                            [--to ADDRESS] [--subject TEXT] [--message-id ID] [--timestamp RFC3339]
                            [--url URL] [--user-agent TEXT]

Sends one email event to the internal ingest endpoint (MAILYARD_INTERNAL_ADDR,
authenticated with MAILYARD_INTERNAL_TOKEN) and prints the delivery ids.
Sending the same --event-id again creates nothing new.
TYPE is an email event: ` + eventtype.Join(eventtype.Email(), ", ") + `.`

// cmdEvents is `mailyard events emit`: what the sending pipeline does, by hand.
func cmdEvents(ctx context.Context, args []string) error {
	if len(args) == 0 || args[0] != "emit" {
		fmt.Fprintln(os.Stderr, eventsUsage)
		return errors.New("usage: mailyard events emit --domain NAME --type TYPE")
	}
	fs := flag.NewFlagSet("events emit", flag.ContinueOnError)
	fs.Usage = func() { fmt.Fprintln(os.Stderr, eventsUsage) }
	domain := fs.String("domain", "", "verified sending domain (required)")
	eventType := fs.String("type", "", eventtype.Join(eventtype.Email(), ", ")+" (required)")
	eventID := fs.String("event-id", "", "idempotency key; default: a new UUID")
	to := fs.String("to", "recipient@example.com", "recipient address")
	subject := fs.String("subject", "Hello from Mailyard", "message subject")
	messageID := fs.String("message-id", "", "message id; default: a new UUID")
	timestamp := fs.String("timestamp", "", "event time, RFC 3339; default: now")
	url := fs.String("url", "", "clicked only: the link followed")
	userAgent := fs.String("user-agent", "", "opened and clicked only: the recipient's user agent")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if *domain == "" || *eventType == "" {
		fs.Usage()
		return errors.New("--domain and --type are required")
	}
	if !eventtype.Type(*eventType).IsEmail() {
		return fmt.Errorf("--type: %q is not an email event; expected one of %s", *eventType, eventtype.Join(eventtype.Email(), ", "))
	}
	at := time.Now().UTC()
	if *timestamp != "" {
		t, err := time.Parse(time.RFC3339, *timestamp)
		if err != nil {
			return fmt.Errorf("--timestamp: %w", err)
		}
		at = t
	}
	if *eventID == "" {
		*eventID = uuid.NewString()
	}
	if *messageID == "" {
		*messageID = uuid.NewString()
	}
	cfg, err := config.Load(config.Need{InternalToken: true})
	if err != nil {
		return err
	}
	event := map[string]any{
		"event_id": *eventID, "domain": *domain, "event_type": *eventType, "timestamp": at.Format(time.RFC3339),
		"message_id": *messageID, "to_email": *to, "subject": *subject,
	}
	if *url != "" {
		event["url"] = *url
	}
	if *userAgent != "" {
		event["user_agent"] = *userAgent
	}
	body, err := json.Marshal(event)
	if err != nil {
		return err
	}
	return emitEvent(ctx, os.Stdout, ingestURL(cfg.InternalAddr), cfg.InternalToken, body)
}

// ingestURL turns the listen address into a URL to call; a wildcard host
// (":8081", "0.0.0.0:8081") is reached on loopback.
func ingestURL(addr string) string {
	host, port, _ := net.SplitHostPort(addr)
	if host == "" || host == "0.0.0.0" || host == "::" {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, port) + "/internal/v1/events"
}

// internalClient reaches the internal listener directly: it carries
// MAILYARD_INTERNAL_TOKEN and recipients' addresses over plain HTTP, which
// http.DefaultClient would hand to an HTTP_PROXY of the environment for any
// address but loopback.
var internalClient = &http.Client{Transport: &http.Transport{Proxy: nil}}

func emitEvent(ctx context.Context, out io.Writer, url, token string, body []byte) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	res, err := internalClient.Do(req)
	if err != nil {
		return fmt.Errorf("internal listener: %w", err)
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(res.Body, 1<<20))
	var env struct {
		Data struct {
			EventID     string   `json:"event_id"`
			DeliveryIDs []string `json:"delivery_ids"`
		} `json:"data"`
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
			Details []struct {
				Location string `json:"location"`
				Message  string `json:"message"`
			} `json:"details"`
		} `json:"error"`
	}
	_ = json.Unmarshal(raw, &env)
	if res.StatusCode != http.StatusAccepted {
		msg := env.Error.Message
		for _, d := range env.Error.Details {
			msg += "; " + strings.TrimSpace(d.Location+": "+d.Message)
		}
		if msg == "" {
			msg = strings.TrimSpace(string(raw))
		}
		return fmt.Errorf("ingest answered %d %s: %s", res.StatusCode, env.Error.Code, msg)
	}
	fmt.Fprintf(out, "event %s: %d deliveries\n", env.Data.EventID, len(env.Data.DeliveryIDs))
	for _, id := range env.Data.DeliveryIDs {
		fmt.Fprintln(out, id)
	}
	return nil
}
