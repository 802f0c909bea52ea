package webhook

import (
	"encoding/base64"
	"strings"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
)

// The example from GitHub's documentation of X-Hub-Signature-256.
func TestSignSeedKnownVector(t *testing.T) {
	got := SignSeed("It's a Secret to Everybody", []byte("Hello, World!"))
	want := "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
	if got != want {
		t.Fatalf("SignSeed = %s, want %s", got, want)
	}
}

// The vector from the Standard Webhooks reference implementations.
func TestSignStandardKnownVector(t *testing.T) {
	got, err := SignStandard("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "msg_p5jXN8AQM9LWM0D4loKWxJek",
		time.Unix(1614265330, 0), []byte(`{"test": 2432232314}`))
	if err != nil {
		t.Fatal(err)
	}
	if want := "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="; got != want {
		t.Fatalf("SignStandard = %s, want %s", got, want)
	}
}

func TestSignStandardMatchesLibrary(t *testing.T) {
	secret, err := NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	wh, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		t.Fatal(err)
	}
	ts := time.Unix(1_800_000_000, 0)
	body := []byte(`{"event_type":"bounced"}`)
	want, _ := wh.Sign("id-1", ts, body)
	got, err := SignStandard(secret, "id-1", ts, body)
	if err != nil || got != want {
		t.Fatalf("SignStandard = %q, %v; library says %q", got, err, want)
	}
}

func TestSignStandardRejectsBadSecret(t *testing.T) {
	for _, s := range []string{"", "whsec_", "whsec_%%%", "plain text"} {
		if _, err := SignStandard(s, "id", time.Now(), nil); err == nil {
			t.Errorf("SignStandard accepted secret %q", s)
		}
	}
}

func TestNewSecret(t *testing.T) {
	a, err := NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	b, _ := NewSecret()
	if a == b {
		t.Fatal("two secrets are equal")
	}
	if !strings.HasPrefix(a, "whsec_") {
		t.Fatalf("secret %q lacks whsec_", a)
	}
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(a, "whsec_"))
	if err != nil || len(key) != 32 {
		t.Fatalf("secret %q: %d bytes, %v", a, len(key), err)
	}
}
