package keys

import (
	"strings"
	"testing"
)

func TestNewAPIKeyFormat(t *testing.T) {
	key, err := NewAPIKey()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(key, "myk_") || len(key) != KeyLength {
		t.Fatalf("key %q has the wrong shape", key)
	}
	if err := CheckAPIKey(key); err != nil {
		t.Fatalf("fresh key fails its own check: %v", err)
	}
}

// A million keys: all unique, all well-formed. Run with -short to skip in quick loops.
func TestMillionKeysUniqueAndValid(t *testing.T) {
	n := 1_000_000
	if testing.Short() {
		n = 10_000
	}
	seen := make(map[string]struct{}, n)
	for i := 0; i < n; i++ {
		key, err := NewAPIKey()
		if err != nil {
			t.Fatal(err)
		}
		if _, dup := seen[key]; dup {
			t.Fatalf("duplicate key after %d", i)
		}
		seen[key] = struct{}{}
		if !strings.HasPrefix(key, KeyPrefix) || CheckAPIKey(key) != nil {
			t.Fatalf("key %q fails its format check", key)
		}
	}
}

// Every single-character substitution of a key is caught by the checksum (CRC32
// detects all single-symbol errors within its length), and so are truncation,
// extension and a wrong prefix.
func TestMutatedKeysFailChecksum(t *testing.T) {
	key, err := NewAPIKey()
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < len(key); i++ {
		for _, c := range base62 + "_-" {
			if byte(c) == key[i] {
				continue
			}
			mutated := key[:i] + string(c) + key[i+1:]
			if CheckAPIKey(mutated) == nil {
				t.Fatalf("mutation at %d to %q passes: %s", i, c, mutated)
			}
		}
	}
	for _, bad := range []string{"", key[:len(key)-1], key + "A", "myx" + key[3:], strings.ToUpper(key[:4]) + key[4:], " " + key[1:]} {
		if CheckAPIKey(bad) == nil {
			t.Fatalf("%q passes", bad)
		}
	}
}

func TestDigestIsSHA256(t *testing.T) {
	if d := Digest("abc"); len(d) != 32 {
		t.Fatalf("digest length %d", len(d))
	}
}
