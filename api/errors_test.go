package api

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"log/slog"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/mailyard/mailyard/internal/apperr"
	"github.com/mailyard/mailyard/internal/store"
)

// The README's error table lists every code httpStatusByCode has, with the same
// status, and no other code: a client reading it knows every answer.
func TestREADMEListsEveryErrorCode(t *testing.T) {
	data, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(data), "\nEvery code the API answers:\n")
	if !ok {
		t.Fatal(`README.md has no "Every code the API answers:" table`)
	}
	row := regexp.MustCompile("^\\| `([a-z_]+)` \\| ([0-9]{3})\\b")
	listed := map[string]int{}
	inTable := false
	for _, line := range strings.Split(section, "\n") {
		if !strings.HasPrefix(line, "|") {
			if inTable {
				break // the table ended
			}
			continue
		}
		inTable = true
		m := row.FindStringSubmatch(line)
		if m == nil {
			if !strings.HasPrefix(line, "| code ") && !strings.HasPrefix(line, "|---") {
				t.Errorf("README error table row not understood: %s", line)
			}
			continue
		}
		status, _ := strconv.Atoi(m[2])
		if _, twice := listed[m[1]]; twice {
			t.Errorf("README lists %s twice", m[1])
		}
		listed[m[1]] = status
	}
	if len(listed) == 0 {
		t.Fatal("README error table has no rows")
	}
	for code, status := range httpStatusByCode {
		got, ok := listed[code]
		switch {
		case !ok:
			t.Errorf("the API answers %s (%d) but the README's error table does not list it", code, status)
		case got != status:
			t.Errorf("README says %s is %d, httpStatusByCode says %d", code, got, status)
		}
	}
	for code := range listed {
		if _, ok := httpStatusByCode[code]; !ok {
			t.Errorf("README lists %s, which httpStatusByCode does not have", code)
		}
	}
}

// Every code internal/apperr declares has a status, and the table has no code
// apperr does not declare. The constants are read from the source: Go cannot
// list a package's constants at run time.
func TestEveryAppErrCodeHasAStatus(t *testing.T) {
	file, err := parser.ParseFile(token.NewFileSet(), "../internal/apperr/apperr.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	declared := map[string]bool{}
	for _, decl := range file.Decls {
		gen, ok := decl.(*ast.GenDecl)
		if !ok || gen.Tok != token.CONST {
			continue
		}
		for _, spec := range gen.Specs {
			for _, v := range spec.(*ast.ValueSpec).Values {
				if lit, ok := v.(*ast.BasicLit); ok && lit.Kind == token.STRING {
					code, _ := strconv.Unquote(lit.Value)
					declared[code] = true
				}
			}
		}
	}
	if len(declared) < 10 {
		t.Fatalf("found only %d codes in apperr.go: %v", len(declared), declared)
	}
	for code := range declared {
		if _, ok := httpStatusByCode[code]; !ok {
			t.Errorf("apperr declares %s but httpStatusByCode gives it no status", code)
		}
	}
	for code := range httpStatusByCode {
		if !declared[code] {
			t.Errorf("httpStatusByCode has %s, which apperr does not declare", code)
		}
	}
}

// Huma's own errors get their code from codeForStatus; it must name a code
// whose status is that status, so both directions agree.
func TestCodeForStatusInvertsTheTable(t *testing.T) {
	for code, status := range httpStatusByCode {
		if back := codeForStatus(status); httpStatusByCode[back] != status {
			t.Errorf("codeForStatus(%d) = %s (status %d), from code %s", status, back, httpStatusByCode[back], code)
		}
	}
}

func TestConvertErrorAnswersTypedErrors(t *testing.T) {
	var logged bytes.Buffer
	saved := errorLogger
	errorLogger = slog.New(slog.NewTextHandler(&logged, nil))
	t.Cleanup(func() { errorLogger = saved })

	cases := []struct {
		name    string
		err     error
		status  int
		code    string
		message string
	}{
		{"the store's not found, wrapped", fmt.Errorf("reading: %w", apperr.NotFoundf("webhook")), 404, "not_found", "webhook not found"},
		{"a store sentinel", store.ErrRotationInProgress, 409, "rotation_in_progress", "a DKIM rotation of this domain is in progress"},
		{"a handler's own", apperr.Errorf(apperr.WebhookLimitReached, "webhook", "already %d", 20), 409, "webhook_limit_reached", "already 20"},
		{"unavailable keeps its message", apperr.Errorf(apperr.Unavailable, "delivery", "stored, not scheduled"), 503, "unavailable", "stored, not scheduled"},
		{"internal never explains", apperr.Errorf(apperr.Internal, "domain", "secret detail one"), 500, "internal", ""},
		{"an unknown code is a bug", apperr.Errorf("made_up", "domain", "secret detail two"), 500, "internal", ""},
		{"an untyped error", errors.New("secret detail three"), 500, "internal", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var e *ErrorResponse
			if !errors.As(convertError(context.Background(), c.err), &e) {
				t.Fatalf("not an answer: %v", convertError(context.Background(), c.err))
			}
			if e.GetStatus() != c.status || e.Err.Code != c.code {
				t.Fatalf("%d %s, want %d %s", e.GetStatus(), e.Err.Code, c.status, c.code)
			}
			if c.message != "" && e.Err.Message != c.message {
				t.Fatalf("message %q, want %q", e.Err.Message, c.message)
			}
			if c.status == http.StatusInternalServerError {
				if strings.Contains(e.Err.Message, "secret detail") {
					t.Fatalf("a 500 tells its cause: %q", e.Err.Message)
				}
				if !strings.Contains(logged.String(), c.err.Error()) {
					t.Fatalf("the cause %q was not logged: %s", c.err, logged.String())
				}
			}
		})
	}
}
