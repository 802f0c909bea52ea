package domainname

import (
	"fmt"
	"strings"
)

// checkLabels applies the host name rules (RFC 1123 §2.1, RFC 5891 §4.2.3.1)
// to each label of a lower-case ASCII name: 1 to 63 characters of letters,
// digits and hyphens, no hyphen at either end, and "--" in the third and
// fourth positions only for IDNA "xn--" labels.
func checkLabels(name string) error {
	for _, label := range strings.Split(name, ".") {
		if err := checkLabel(label); err != nil {
			return err
		}
	}
	return nil
}

func checkLabel(label string) error {
	switch {
	case label == "":
		return fmt.Errorf("the domain has an empty label (two dots in a row, or a leading dot)")
	case len(label) > maxLabelLength:
		return fmt.Errorf("the label %q is %d characters long; the maximum is %d", label, len(label), maxLabelLength)
	case label[0] == '-':
		return fmt.Errorf("the label %q starts with a hyphen", label)
	case label[len(label)-1] == '-':
		return fmt.Errorf("the label %q ends with a hyphen", label)
	case len(label) >= 4 && label[2:4] == "--" && !strings.HasPrefix(label, "xn--"):
		return fmt.Errorf("the label %q has hyphens in the third and fourth positions, which are reserved for internationalised (xn--) labels", label)
	}
	for _, r := range label {
		if !isLDH(r) {
			return fmt.Errorf("the label %q contains %q; only letters, digits and hyphens are allowed", label, r)
		}
	}
	return nil
}

// isLDH reports whether r is a letter, digit or hyphen. Names reach this
// check lower-cased.
func isLDH(r rune) bool {
	return r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-'
}
