package domainname

import (
	"fmt"
	"strings"

	"golang.org/x/net/publicsuffix"
)

// checkRegistrable rejects names a customer cannot own and therefore cannot
// prove with DNS records: single labels, localhost, names whose top-level
// label is numeric (IPv4-like), and public suffixes. The private section of
// the public suffix list counts too: nobody can add records at "github.io"
// itself, only under it.
func checkRegistrable(name string) error {
	if name == "localhost" || strings.HasSuffix(name, ".localhost") {
		return fmt.Errorf("%q is reserved for the local machine (RFC 6761); add a domain registered in public DNS", name)
	}
	suffix, icann := publicsuffix.PublicSuffix(name)
	dot := strings.LastIndexByte(name, '.')
	if dot < 0 && !icann {
		return fmt.Errorf("%q has a single label; add a full domain such as \"example.com\"", name)
	}
	// No top-level domain is numeric (RFC 3696 §2): such a name is an IPv4
	// address or a fragment of one.
	if dot >= 0 && isDigits(name[dot+1:]) {
		return fmt.Errorf("%q looks like an IP address; a domain name is required", name)
	}
	// PublicSuffix applies the list's wildcard and exception rules. For a
	// name not on the list it returns the top-level label, so single labels
	// that are not top-level domains were answered above.
	if suffix == name {
		return fmt.Errorf("%q is a public suffix; add a domain registered under it", name)
	}
	return nil
}

func isDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}
