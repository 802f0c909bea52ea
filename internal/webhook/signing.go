package webhook

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"strconv"
	"strings"
	"time"
)

// secretPrefix marks a Standard Webhooks signing secret; the rest is the
// base64 key.
const secretPrefix = "whsec_"

// secretKeyBytes is the length of the random key inside a signing secret.
const secretKeyBytes = 32

// NewSecret returns a fresh signing secret: "whsec_" and the standard
// base64 of 32 random bytes.
func NewSecret() (string, error) {
	key := make([]byte, secretKeyBytes)
	if _, err := rand.Read(key); err != nil {
		return "", err
	}
	return secretPrefix + base64.StdEncoding.EncodeToString(key), nil
}

// SignSeed returns the X-Service-Signature value: "sha256=" and the hex
// HMAC-SHA256 of body keyed with the whole secret string as shown to the
// customer. It is the format of GitHub's X-Hub-Signature-256, so receivers
// can reuse existing verifiers.
func SignSeed(secret string, body []byte) string {
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write(body)
	return "sha256=" + hex.EncodeToString(mac.Sum(nil))
}

// SignStandard returns the Standard Webhooks webhook-signature value:
// "v1," and the base64 HMAC-SHA256 of "msgID.unixSeconds.body", keyed with
// the base64-decoded part of the "whsec_" secret.
func SignStandard(secret, msgID string, ts time.Time, body []byte) (string, error) {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, secretPrefix))
	if err != nil || len(key) == 0 {
		return "", errors.New("signing secret is not whsec_ followed by base64")
	}
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(msgID))
	mac.Write([]byte{'.'})
	mac.Write([]byte(strconv.FormatInt(ts.Unix(), 10)))
	mac.Write([]byte{'.'})
	mac.Write(body)
	return "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil)), nil
}
