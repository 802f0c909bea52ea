package smtpsend

import (
	"context"
	"errors"
	"strings"
	"sync"
	"unicode/utf8"

	"golang.org/x/net/idna"
)

const (
	// maxRecipientsPerTransaction is the number of recipients RFC 5321
	// §4.5.3.1.8 obliges every server to accept in one transaction.
	maxRecipientsPerTransaction = 100
	// parallelTransactions bounds the transactions (one per recipient
	// domain, or per hundred recipients) one Send runs at once.
	parallelTransactions = 4
)

// Send makes one attempt to deliver msg from the envelope sender from to
// each recipient, and returns one Result per recipient, in order. In mx
// mode the recipients are grouped by domain, one transaction per domain; in
// relay mode they share one.
//
// msg is sent exactly as given: it must be a complete message with CRLF
// line endings (the DKIM signature covers those bytes). Dot-stuffing is the
// protocol's and is undone by the receiver; a bare LF would go out as CRLF
// and a missing final CRLF is added, as SMTP allows nothing else.
//
// ctx bounds the whole attempt: when it ends, open connections are closed
// and the recipients not yet answered are Deferred.
func (s *Sender) Send(ctx context.Context, from string, recipients []string, msg []byte) []Result {
	if bad := invalidSender(from, recipients); bad != nil {
		return bad
	}
	results := make([]Result, len(recipients))

	var batches []*batch
	open := map[string]*batch{} // by domain (mx) or "" (relay): the batch being filled
	of := map[string]*batch{}   // by recipient
	for i, rcpt := range recipients {
		if b := of[rcpt]; b != nil {
			// A recipient listed twice gets the message once.
			b.index[rcpt] = append(b.index[rcpt], i)
			continue
		}
		domain, err := addressDomain(rcpt)
		if err != nil {
			results[i] = outcome{status: HardBounce, code: codeInvalidAddress, message: "invalid recipient address: " + err.Error()}.result(rcpt)
			continue
		}
		key := domain
		if s.cfg.Mode == ModeRelay {
			key = "" // the relay routes every domain
		}
		b := open[key]
		if b == nil || len(b.rcpts) == maxRecipientsPerTransaction {
			b = &batch{domain: domain, index: map[string][]int{}}
			open[key] = b
			batches = append(batches, b)
		}
		b.rcpts = append(b.rcpts, rcpt)
		b.index[rcpt] = []int{i}
		of[rcpt] = b
	}

	for _, b := range batches {
		b.from, b.msg = from, msg
	}
	s.run(ctx, batches, results)
	return results
}

// Envelope is one recipient with an envelope sender and a message of its
// own.
type Envelope struct {
	From      string
	Recipient string
	Message   []byte
}

// SendEach is Send for recipients that each have their own return path
// (docs/inbound.md) and may have their own message (a tracked email,
// docs/tracking.md): one transaction per recipient, as many at once as Send
// runs. It returns one Result per envelope, in order.
func (s *Sender) SendEach(ctx context.Context, envs []Envelope) []Result {
	results := make([]Result, len(envs))
	var batches []*batch
	for i, env := range envs {
		if bad := invalidSender(env.From, []string{env.Recipient}); bad != nil {
			results[i] = bad[0]
			continue
		}
		domain, err := addressDomain(env.Recipient)
		if err != nil {
			results[i] = outcome{status: HardBounce, code: codeInvalidAddress, message: "invalid recipient address: " + err.Error()}.result(env.Recipient)
			continue
		}
		batches = append(batches, &batch{domain: domain, rcpts: []string{env.Recipient},
			index: map[string][]int{env.Recipient: {i}}, from: env.From, msg: env.Message})
	}
	s.run(ctx, batches, results)
	return results
}

// invalidSender answers every recipient deferred when from cannot be a
// MAIL FROM, nil when it can. It is our own mistake: no recipient should
// bounce (and be suppressed) for it.
func invalidSender(from string, rcpts []string) []Result {
	_, err := addressDomain(from)
	if err == nil {
		return nil
	}
	o := deferred("invalid envelope sender: %v", err)
	results := make([]Result, len(rcpts))
	for i, rcpt := range rcpts {
		results[i] = o.result(rcpt)
	}
	return results
}

// run makes the batches' transactions, parallelTransactions at a time, and
// writes each recipient's result.
func (s *Sender) run(ctx context.Context, batches []*batch, results []Result) {
	var wg sync.WaitGroup
	slots := make(chan struct{}, parallelTransactions)
	for _, b := range batches {
		wg.Go(func() {
			slots <- struct{}{}
			defer func() { <-slots }()
			outcomes := s.deliver(ctx, b.domain, b.from, b.rcpts, b.msg)
			for j, rcpt := range b.rcpts {
				for _, i := range b.index[rcpt] {
					results[i] = outcomes[j].result(rcpt)
				}
			}
		})
	}
	wg.Wait()
}

// batch is the recipients of one transaction.
type batch struct {
	domain string // mx mode: the recipients' domain, for DNS
	rcpts  []string
	index  map[string][]int // recipient → its positions in Send's list
	from   string
	msg    []byte
}

// deliver runs one transaction and returns one outcome per recipient.
func (s *Sender) deliver(ctx context.Context, domain, from string, rcpts []string, msg []byte) []outcome {
	if s.cfg.Mode == ModeRelay {
		return s.viaRelay(ctx, from, rcpts, msg)
	}
	return s.viaMX(ctx, domain, from, rcpts, msg)
}

// addressDomain checks that addr can go into MAIL FROM or RCPT TO and
// returns its domain in lower-case ASCII, as DNS wants it (internationalized
// names become A-labels).
func addressDomain(addr string) (string, error) {
	switch {
	case addr == "":
		return "", errors.New("empty")
	case len(addr) > 254:
		return "", errors.New("longer than 254 bytes")
	case !utf8.ValidString(addr):
		return "", errors.New("not valid UTF-8")
	case strings.ContainsFunc(addr, func(r rune) bool { return r <= ' ' || r == 0x7f || r == '<' || r == '>' }):
		// Anything that could break out of the command line or its angle
		// brackets.
		return "", errors.New("contains spaces, control characters or angle brackets")
	}
	at := strings.LastIndexByte(addr, '@')
	if at <= 0 || at == len(addr)-1 {
		return "", errors.New("not local-part@domain")
	}
	domain := addr[at+1:]
	if strings.HasPrefix(domain, "[") {
		return "", errors.New("address literals are not supported")
	}
	ascii, err := idna.Lookup.ToASCII(domain)
	if err != nil {
		return "", errors.New("the domain is not a valid host name")
	}
	return strings.ToLower(ascii), nil
}
