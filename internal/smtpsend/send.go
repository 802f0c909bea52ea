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
	// maxTransactionsPerSession bounds the transactions one connection
	// carries: receivers limit them (Exchange: 20 by default), and a
	// domain with more recipients gets several connections, which run in
	// parallel.
	maxTransactionsPerSession = 20
	// parallelSessions bounds the connections one Send or SendEach has
	// open at once.
	parallelSessions = 4
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
	return s.SendReporting(ctx, from, recipients, msg, nil)
}

// Done is told, as each session ends, the positions (in the caller's list)
// whose Results are final and those results (results[k] is position
// positions[k]'s), so that the caller may record them before the slowest
// session ends. It is called from the sessions' goroutines, at once by
// several.
type Done func(positions []int, results []Result)

// SendReporting is Send, telling done (if not nil) of each session's
// results as it ends.
func (s *Sender) SendReporting(ctx context.Context, from string, recipients []string, msg []byte, done Done) []Result {
	if bad := invalidSender(from, recipients); bad != nil {
		return bad
	}
	results := make([]Result, len(recipients))

	var plan sessionPlan
	open := map[string]*transaction{} // by domain (mx) or "" (relay): the transaction being filled
	of := map[string]*transaction{}   // by recipient
	for i, rcpt := range recipients {
		if tx := of[rcpt]; tx != nil {
			// A recipient listed twice gets the message once.
			tx.index[rcpt] = append(tx.index[rcpt], i)
			continue
		}
		domain, err := addressDomain(rcpt)
		if err != nil {
			results[i] = invalidRecipient(rcpt, err)
			continue
		}
		key := s.sessionKey(domain)
		tx := open[key]
		if tx == nil || len(tx.rcpts) == maxRecipientsPerTransaction {
			tx = &transaction{from: from, msg: msg, index: map[string][]int{}}
			open[key] = tx
			plan.add(key, domain, tx)
		}
		tx.rcpts = append(tx.rcpts, rcpt)
		tx.index[rcpt] = []int{i}
		of[rcpt] = tx
	}
	s.run(ctx, plan.sessions, results, done)
	return results
}

// Envelope is one recipient with an envelope sender and a message of its
// own: Message or, when that is nil, what Load returns. Load is called as
// the recipient's transaction begins and the message is let go once it
// ends, so that a SendEach of many large messages holds a few at a time; a
// recipient whose Load fails is Deferred.
type Envelope struct {
	From      string
	Recipient string
	Message   []byte
	Load      func(context.Context) ([]byte, error)
}

// SendEach is Send for recipients that each have their own return path
// (docs/inbound.md) and may have their own message (a tracked email,
// docs/tracking.md): one transaction per recipient. The transactions to one
// domain (all of them, through a relay) share connections, up to
// maxTransactionsPerSession each. It returns one Result per envelope, in
// order.
func (s *Sender) SendEach(ctx context.Context, envs []Envelope) []Result {
	return s.SendEachReporting(ctx, envs, nil)
}

// SendEachReporting is SendEach, telling done (if not nil) of each
// session's results as it ends.
func (s *Sender) SendEachReporting(ctx context.Context, envs []Envelope, done Done) []Result {
	results := make([]Result, len(envs))
	var plan sessionPlan
	for i, env := range envs {
		if bad := invalidSender(env.From, []string{env.Recipient}); bad != nil {
			results[i] = bad[0]
			continue
		}
		domain, err := addressDomain(env.Recipient)
		if err != nil {
			results[i] = invalidRecipient(env.Recipient, err)
			continue
		}
		plan.add(s.sessionKey(domain), domain, &transaction{from: env.From, rcpts: []string{env.Recipient},
			index: map[string][]int{env.Recipient: {i}}, msg: env.Message, load: env.Load})
	}
	s.run(ctx, plan.sessions, results, done)
	return results
}

// sessionKey is what the transactions that may share a connection have in
// common: the recipients' domain in mx mode, nothing through the relay,
// which routes every domain.
func (s *Sender) sessionKey(domain string) string {
	if s.cfg.Mode == ModeRelay {
		return ""
	}
	return domain
}

func invalidRecipient(rcpt string, err error) Result {
	return outcome{status: HardBounce, code: codeInvalidAddress, message: "invalid recipient address: " + err.Error()}.result(rcpt)
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

// run makes the sessions' transactions, parallelSessions sessions at a
// time, and writes each recipient's result, telling done (if not nil) of
// each session's as it ends.
func (s *Sender) run(ctx context.Context, sessions []*plannedSession, results []Result, done Done) {
	var wg sync.WaitGroup
	slots := make(chan struct{}, parallelSessions)
	for _, ps := range sessions {
		wg.Go(func() {
			slots <- struct{}{}
			s.deliver(ctx, ps)
			<-slots // done's work does not hold up the sessions waiting
			var positions []int
			var theirs []Result
			for _, tx := range ps.txs {
				for j, rcpt := range tx.rcpts {
					for _, i := range tx.index[rcpt] {
						results[i] = tx.outcomes[j].result(rcpt)
						positions, theirs = append(positions, i), append(theirs, results[i])
					}
				}
			}
			if done != nil {
				done(positions, theirs)
			}
		})
	}
	wg.Wait()
}

// transaction is one message from one envelope sender to some recipients.
type transaction struct {
	from     string
	rcpts    []string
	index    map[string][]int // recipient → its positions in the caller's list
	msg      []byte
	load     func(context.Context) ([]byte, error) // msg, when msg is nil
	outcomes []outcome                             // one per recipient, once made
}

// message is the transaction's message, loaded if need be.
func (tx *transaction) message(ctx context.Context) ([]byte, error) {
	if tx.msg != nil || tx.load == nil {
		return tx.msg, nil
	}
	return tx.load(ctx)
}

// plannedSession is the transactions one connection carries, in order.
type plannedSession struct {
	domain string // mx mode: the recipients' domain, for DNS
	txs    []*transaction
}

// sessionPlan sorts transactions into sessions: those of one key share a
// session until it carries maxTransactionsPerSession.
type sessionPlan struct {
	sessions []*plannedSession
	filling  map[string]*plannedSession
}

func (p *sessionPlan) add(key, domain string, tx *transaction) {
	ps := p.filling[key]
	if ps == nil || len(ps.txs) == maxTransactionsPerSession {
		ps = &plannedSession{domain: domain}
		if p.filling == nil {
			p.filling = map[string]*plannedSession{}
		}
		p.filling[key] = ps
		p.sessions = append(p.sessions, ps)
	}
	ps.txs = append(ps.txs, tx)
}

// deliver runs a planned session's transactions on one connection. A
// connection that the server closes or drops between transactions is opened
// again for the rest, once per transaction at most: receivers close idle or
// busy connections, and that says nothing about the next message. But a
// server that answers 421 on a connection opened for the transaction says
// it will not take mail now (rate limits say so): the transactions left
// are deferred with its reply rather than opening a connection for each.
// When no connection can be opened, every transaction left gets that
// outcome.
func (s *Sender) deliver(ctx context.Context, ps *plannedSession) {
	var sess *session
	defer func() {
		if sess != nil {
			sess.quit()
			sess.close()
		}
	}()
	for i := 0; i < len(ps.txs); i++ {
		tx := ps.txs[i]
		reused := sess != nil
		if sess == nil {
			var failure outcome
			if sess, failure = s.connect(ctx, ps.domain); sess == nil {
				for _, rest := range ps.txs[i:] {
					rest.outcomes = same(len(rest.rcpts), failure)
				}
				return
			}
		}
		msg, err := tx.message(ctx)
		if err != nil {
			why := "the message could not be read"
			if ctx.Err() != nil {
				why = describe(ctx, sess.where, "reading the message", err)
			}
			tx.outcomes = same(len(tx.rcpts), deferred("%s", why))
			continue
		}
		var next sessionState
		tx.outcomes, next = sess.transact(ctx, tx.from, tx.rcpts, msg)
		if next == sessionOpen {
			continue
		}
		sess.close()
		sess = nil
		if next == sessionLostBeforeMail && reused {
			i-- // the transaction had not begun: again, on a new connection
			continue
		}
		if closing, ok := closingReply(tx.outcomes); ok && !reused {
			for _, rest := range ps.txs[i+1:] {
				rest.outcomes = same(len(rest.rcpts), closing)
			}
			return
		}
	}
}

// closingReply is the 421 among a transaction's outcomes, if any: the
// server closing the session.
func closingReply(outcomes []outcome) (outcome, bool) {
	for _, o := range outcomes {
		if o.code == 421 {
			return o, true
		}
	}
	return outcome{}, false
}

// connect opens a session for mail to domain: with the relay, or with the
// first of the domain's exchangers that gets as far as one. When none does,
// failure is every recipient's outcome.
func (s *Sender) connect(ctx context.Context, domain string) (sess *session, failure outcome) {
	if s.cfg.Mode == ModeRelay {
		return s.viaRelay(ctx)
	}
	return s.viaMX(ctx, domain)
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
