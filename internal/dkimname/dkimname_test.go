package dkimname

import "testing"

func TestNames(t *testing.T) {
	sel := Selector("u9gq78y5", 2)
	if sel != "u9gq78y5-2" || CustomerName(sel, "shop.example") != "u9gq78y5-2._domainkey.shop.example" ||
		KeyName(sel, "dkim.mailyard.test") != "u9gq78y5-2.dkim.mailyard.test" {
		t.Fatalf("names %q %q %q", sel, CustomerName(sel, "shop.example"), KeyName(sel, "dkim.mailyard.test"))
	}
}
