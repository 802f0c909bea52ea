package testenv

import (
	"bytes"
	"os/exec"
	"testing"
)

// CheckMetrics runs `promtool check metrics` (Debian's prometheus package;
// .ci/run installs it) on a scrape and fails the test on any problem it
// reports: a name against the conventions, a missing help text, a counter
// without _total, text it cannot parse.
func CheckMetrics(t testing.TB, scrape []byte) {
	t.Helper()
	bin, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatal("promtool is not installed (apt-get install prometheus): the metrics lint cannot run")
	}
	cmd := exec.Command(bin, "check", "metrics")
	cmd.Stdin = bytes.NewReader(scrape)
	out, err := cmd.CombinedOutput()
	if err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Fatalf("promtool check metrics: %v\n%s", err, out)
	}
}
