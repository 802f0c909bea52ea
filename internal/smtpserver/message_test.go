package smtpserver

import (
	"strings"
	"testing"
)

// An empty message, by DATA or by BDAT 0 LAST, reaches Data as an empty
// message, not nil: nil would be stored as NULL, what an erased message's
// bytes are.
func TestEmptyMessageIsNotNil(t *testing.T) {
	b := newBackend()
	_, addr := start(t, Config{}, b)
	if reply := sendData(t, addr, nil); !strings.HasPrefix(reply, "250 ") {
		t.Fatalf("empty DATA: %q", reply)
	}
	if reply := sendBDAT(t, addr, nil); !strings.HasPrefix(reply, "250 ") {
		t.Fatalf("BDAT 0 LAST: %q", reply)
	}
	got := b.delivered()
	if len(got) != 2 {
		t.Fatalf("delivered %q, want two empty messages", got)
	}
	for i, msg := range got {
		if msg == nil || len(msg) != 0 {
			t.Fatalf("message %d is %#v, want empty and not nil", i, msg)
		}
	}
}
