package api_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// redoclyCLI is where `make redocly` installs the pinned Redocly CLI
// (REDOCLY_VER in the Makefile) from the npm registry.
const redoclyCLI = "../bin/redocly/node_modules/.bin/redocly"

// The served API description passes `redocly lint` with the recommended
// rules and neither errors nor warnings (README, "API reference").
func TestRedoclyLint(t *testing.T) {
	cli, err := filepath.Abs(redoclyCLI)
	if err == nil {
		_, err = os.Stat(cli)
	}
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("the Redocly CLI is not installed at %s: run make redocly (.ci/run does)", redoclyCLI)
		}
		t.Skip("the Redocly CLI is not installed: make redocly")
	}
	h := newHarness(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "openapi.yaml"), h.do("GET", "/openapi.yaml", "", nil).Raw, 0o600); err != nil {
		t.Fatal(err)
	}
	ignore, err := os.ReadFile("testdata/redocly-lint-ignore.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, ".redocly.lint-ignore.yaml"), ignore, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(cli, "lint", "--extends=recommended", "--format=stylish", "openapi.yaml")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "REDOCLY_TELEMETRY=off", "REDOCLY_SUPPRESS_UPDATE_NOTICE=true")
	out, err := cmd.CombinedOutput()
	if err != nil || strings.Contains(string(out), "warning") {
		t.Fatalf("redocly lint: %v\n%s", err, out)
	}
}
