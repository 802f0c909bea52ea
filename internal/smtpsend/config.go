package smtpsend

import (
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/mailyard/mailyard/internal/dnscheck"
)

// Modes.
const (
	// ModeMX delivers to the recipients' mail exchangers.
	ModeMX = "mx"
	// ModeRelay hands every message to one relay (smart host).
	ModeRelay = "relay"
)

// TLS policies for STARTTLS.
const (
	// TLSOpportunistic uses STARTTLS when the server offers it.
	TLSOpportunistic = "opportunistic"
	// TLSRequired never sends a message in clear: a server that does not
	// offer STARTTLS, or whose TLS handshake fails, gets nothing.
	TLSRequired = "required"
)

// Defaults for the zero values of Config.
const (
	DefaultPort = 25
	// DefaultCommandTimeout is RFC 5321 §4.5.3.2's time-out for the
	// greeting and for MAIL and RCPT replies.
	DefaultCommandTimeout = 5 * time.Minute
	// DefaultDataTimeout bounds writing the message and waiting for the
	// reply to its final dot (RFC 5321 §4.5.3.2.6 gives the server 10
	// minutes for that reply).
	DefaultDataTimeout = 10 * time.Minute
	// DefaultDialTimeout bounds one TCP connection attempt, so a host that
	// drops packets leaves time for the next mail exchanger.
	DefaultDialTimeout = 30 * time.Second
)

// Config is how a Sender delivers.
type Config struct {
	// Mode is ModeMX or ModeRelay; empty means ModeMX.
	Mode string
	// Port is the mail exchangers' port in mx mode; 0 means 25.
	Port int
	// HELO is the name we introduce ourselves with in EHLO; required. It
	// should be a fully qualified name whose address resolves back to it.
	HELO string
	// TLS is TLSOpportunistic (the default when empty) or TLSRequired.
	TLS string
	// AllowPrivateNetworks lets mx mode connect to special-purpose
	// addresses (loopback, private, link-local, ...), which it otherwise
	// refuses at dial time. Relay mode always may: the operator chose it.
	AllowPrivateNetworks bool

	// Relay is the relay's host:port in relay mode.
	Relay string
	// RelayImplicitTLS speaks TLS from the first byte (usually port 465)
	// instead of STARTTLS.
	RelayImplicitTLS bool
	// RelayUsername and RelayPassword, when set, authenticate with AUTH
	// PLAIN. Both or neither.
	RelayUsername, RelayPassword string

	// RootCAs verifies the relay's certificate; nil means the system pool.
	RootCAs *x509.CertPool

	// CommandTimeout bounds the wait for each reply (greeting, EHLO,
	// STARTTLS and the TLS handshake, AUTH, MAIL, RCPT, DATA); 0 means
	// DefaultCommandTimeout.
	CommandTimeout time.Duration
	// DataTimeout bounds sending the message and the wait for the reply to
	// its end; 0 means DefaultDataTimeout.
	DataTimeout time.Duration
	// DialTimeout bounds one TCP connection attempt; 0 means
	// DefaultDialTimeout.
	DialTimeout time.Duration

	// Resolver looks up MX and address records in mx mode; required there.
	Resolver *dnscheck.Checker
}

// Sender delivers messages. It is safe for concurrent use.
type Sender struct {
	cfg       Config
	relayHost string // relay mode: the relay's name, for TLS
}

// New checks cfg and fills in its defaults.
func New(cfg Config) (*Sender, error) {
	var errs []error
	if cfg.Mode == "" {
		cfg.Mode = ModeMX
	}
	if cfg.TLS == "" {
		cfg.TLS = TLSOpportunistic
	}
	if cfg.TLS != TLSOpportunistic && cfg.TLS != TLSRequired {
		errs = append(errs, fmt.Errorf("TLS: %q is not one of %s, %s", cfg.TLS, TLSOpportunistic, TLSRequired))
	}
	if err := checkHELO(cfg.HELO); err != nil {
		errs = append(errs, err)
	}
	if (cfg.RelayUsername == "") != (cfg.RelayPassword == "") {
		errs = append(errs, errors.New("relay username and password: set both or neither"))
	}
	if cfg.CommandTimeout < 0 || cfg.DataTimeout < 0 || cfg.DialTimeout < 0 {
		errs = append(errs, errors.New("time-outs must not be negative"))
	}
	s := &Sender{}
	switch cfg.Mode {
	case ModeMX:
		if cfg.Port == 0 {
			cfg.Port = DefaultPort
		}
		if cfg.Port < 1 || cfg.Port > 65535 {
			errs = append(errs, fmt.Errorf("port %d is not from 1 to 65535", cfg.Port))
		}
		if cfg.Resolver == nil {
			errs = append(errs, errors.New("mx mode needs a DNS resolver"))
		}
		// Relay settings in mx mode are a mistake the operator would not
		// notice: mail would silently go elsewhere than intended.
		if cfg.Relay != "" || cfg.RelayImplicitTLS || cfg.RelayUsername != "" {
			errs = append(errs, errors.New("relay settings are set but the mode is mx; set the mode to relay or remove them"))
		}
	case ModeRelay:
		host, err := relayHost(cfg.Relay)
		if err != nil {
			errs = append(errs, err)
		}
		s.relayHost = host
	default:
		errs = append(errs, fmt.Errorf("mode %q is not one of %s, %s", cfg.Mode, ModeMX, ModeRelay))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if cfg.CommandTimeout == 0 {
		cfg.CommandTimeout = DefaultCommandTimeout
	}
	if cfg.DataTimeout == 0 {
		cfg.DataTimeout = DefaultDataTimeout
	}
	if cfg.DialTimeout == 0 {
		cfg.DialTimeout = DefaultDialTimeout
	}
	s.cfg = cfg
	return s, nil
}

// checkHELO accepts a host name or an address literal ("[192.0.2.1]"),
// anything that can follow EHLO on one line.
func checkHELO(name string) error {
	if name == "" {
		return errors.New("HELO name is required (a fully qualified host name)")
	}
	if len(name) > 255 || strings.ContainsFunc(name, func(r rune) bool { return r <= ' ' || r >= 0x7f }) {
		return fmt.Errorf("HELO name %q is not a host name", name)
	}
	return nil
}

func relayHost(relay string) (string, error) {
	if relay == "" {
		return "", errors.New("relay mode needs the relay's host:port")
	}
	host, port, err := net.SplitHostPort(relay)
	if n, perr := strconv.Atoi(port); err != nil || host == "" || perr != nil || n < 1 || n > 65535 {
		return "", fmt.Errorf("relay %q is not host:port", relay)
	}
	return host, nil
}
