package dnsserver

import (
	"net/netip"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// Response rate limiting, as BIND and Knot do it. A UDP query's source
// address is not checked by anyone, so a flood of queries forged with a
// victim's address would have the server send the victim its answers, each
// several times the size of the query (a DKIM key is about 450 bytes, the
// query asking for it about 60). The answers to one client network (/24 for
// IPv4, /56 for IPv6, so a victim cannot be spread over its neighbours) are
// limited to a number per second, with a burst of one second's worth. Past
// it, every second answer is sent empty and truncated, which a real
// resolver asks again over TCP, where a forged source gets nowhere, and the
// others are dropped. TCP answers and loopback clients (which nothing from
// outside can forge) are not limited.

// limitAction is what becomes of one UDP answer.
type limitAction int

const (
	answerFully limitAction = iota
	answerTruncated
	answerDropped
)

const (
	// maxLimitedNetworks bounds the networks tracked at once. A flood from
	// more networks than that (random forged sources) is answered
	// truncated for the networks that find no room: small answers that
	// amplify nothing.
	maxLimitedNetworks = 1 << 16
	// limiterPruneEvery is how often, at most, a full table is swept of
	// networks that have been quiet for a second (their bucket is full
	// again): the sweep walks the whole table.
	limiterPruneEvery = time.Second
)

// responseLimiter decides, per client network, whether a UDP answer is sent.
type responseLimiter struct {
	perSecond rate.Limit
	burst     int
	// unlimited clients: loopback (tests limit it too).
	unlimited func(netip.Addr) bool

	mu        sync.Mutex
	networks  map[netip.Prefix]*networkBucket
	lastPrune time.Time
	// overflow counts the answers to networks that found no room in the
	// table, for the same every-other truncation.
	overflow uint64
}

// networkBucket is one client network's tokens and its limited answers.
type networkBucket struct {
	tokens  *rate.Limiter
	limited uint64
}

// newResponseLimiter limits each client network to perSecond answers (at
// least 1).
func newResponseLimiter(perSecond int) *responseLimiter {
	return &responseLimiter{
		perSecond: rate.Limit(perSecond),
		burst:     perSecond,
		unlimited: netip.Addr.IsLoopback,
		networks:  map[netip.Prefix]*networkBucket{},
	}
}

// decide says what becomes of an answer to client at now.
func (l *responseLimiter) decide(client netip.Addr, now time.Time) limitAction {
	client = client.Unmap()
	if l.unlimited(client) {
		return answerFully
	}
	network := clientNetwork(client)
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.networks[network]
	if b == nil {
		if len(l.networks) >= maxLimitedNetworks {
			l.prune(now)
		}
		if len(l.networks) >= maxLimitedNetworks {
			l.overflow++
			return slip(l.overflow)
		}
		b = &networkBucket{tokens: rate.NewLimiter(l.perSecond, l.burst)}
		l.networks[network] = b
	}
	if b.tokens.AllowN(now, 1) {
		return answerFully
	}
	b.limited++
	return slip(b.limited)
}

// slip truncates the first of every two limited answers and drops the
// second (BIND's default slip of 2): a resolver whose answer was limited
// still learns, once in two tries, to ask over TCP.
func slip(limited uint64) limitAction {
	if limited%2 == 1 {
		return answerTruncated
	}
	return answerDropped
}

// prune forgets the networks whose bucket is full again, at most once per
// limiterPruneEvery. The caller holds l.mu.
func (l *responseLimiter) prune(now time.Time) {
	if now.Sub(l.lastPrune) < limiterPruneEvery {
		return
	}
	l.lastPrune = now
	for network, b := range l.networks {
		if b.tokens.TokensAt(now) >= float64(l.burst) {
			delete(l.networks, network)
		}
	}
}

// clientNetwork is the network a client's answers are counted against.
func clientNetwork(client netip.Addr) netip.Prefix {
	bits := 56
	if client.Is4() {
		bits = 24
	}
	network, _ := client.Prefix(bits)
	return network
}
