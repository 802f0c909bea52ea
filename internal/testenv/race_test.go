//go:build race

package testenv

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// recorder is a testing.TB that keeps what Errorf reports.
type recorder struct {
	testing.TB
	errors []string
}

func (r *recorder) Helper() {}
func (r *recorder) Errorf(format string, args ...any) {
	r.errors = append(r.errors, format)
}

// A real program built with -race that races: its real output and exit status
// make checkRace fail the test; the same program without the race does not.
func TestCheckRaceCatchesARacingProcess(t *testing.T) {
	const racy = `package main

import "fmt"

func main() {
	n := 0
	done := make(chan bool)
	go func() { n++; done <- true }()
	n++
	<-done
	fmt.Println("counted", n)
}
`
	calm := strings.Replace(racy, "go func() { n++; done <- true }()", "go func() { done <- true }()", 1)
	for _, c := range []struct {
		name, src string
		wantRace  bool
	}{{"racy", racy, true}, {"calm", calm, false}} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			writeFile(t, filepath.Join(dir, "go.mod"), "module racy\n\ngo 1.22\n")
			writeFile(t, filepath.Join(dir, "main.go"), c.src)
			bin := filepath.Join(dir, "racy")
			build := exec.Command("go", "build", "-race", "-o", bin, ".")
			build.Dir = dir
			build.Env = append(os.Environ(), "GOFLAGS=")
			if out, err := build.CombinedOutput(); err != nil {
				t.Fatalf("go build -race: %v\n%s", err, out)
			}
			cmd := exec.Command(bin)
			out, _ := cmd.CombinedOutput()
			r := &recorder{TB: t}
			raced := checkRace(r, []string{"racy"}, cmd.ProcessState.ExitCode(), string(out))
			if raced != c.wantRace || (len(r.errors) > 0) != c.wantRace {
				t.Fatalf("checkRace = %v with %d errors, want %v; exit status %d, output:\n%s",
					raced, len(r.errors), c.wantRace, cmd.ProcessState.ExitCode(), out)
			}
		})
	}
}
