package deploy

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/mailyard/mailyard/internal/config"
)

// toolVariables are read by `mailyard dev` and the tests, not by the configuration
// of a deployed process, and are documented in the same table.
var toolVariables = []string{"MAILYARD_TEMPORAL_CLI"}

// The README's configuration table lists every variable the binary reads, and
// nothing it does not.
func TestReadmeConfigurationTable(t *testing.T) {
	section := readmeSection(t, "\n## Configuration\n", "\n## ")
	var listed []string
	for _, line := range strings.Split(section, "\n") {
		if cells := strings.Split(line, "|"); len(cells) > 2 {
			listed = append(listed, regexp.MustCompile(`(?:MAILYARD|TEMPORAL)_[A-Z0-9_]+`).FindAllString(cells[1], -1)...)
		}
	}
	for _, name := range config.Variables() {
		if !slices.Contains(listed, name) {
			t.Errorf("%s is read by the configuration but not in the README's table", name)
		}
	}
	for _, name := range listed {
		if !slices.Contains(config.Variables(), name) && !slices.Contains(toolVariables, name) {
			t.Errorf("%s is in the README's table but the configuration does not read it", name)
		}
	}
}

// The README's code layout names every package of internal/ and workflows/,
// so it cannot fall behind the tree.
func TestReadmeCodeLayout(t *testing.T) {
	layout := readmeSection(t, "Code layout", "\n\n## ")
	workflowsRow := regexp.MustCompile("`workflows/\\{([a-z,]+)\\}`").FindStringSubmatch(layout)
	if workflowsRow == nil {
		t.Fatal("the layout has no `workflows/{...}` row")
	}
	for _, dir := range []string{"internal", "workflows"} {
		entries, err := os.ReadDir("../" + dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			if !e.IsDir() {
				continue
			}
			name := e.Name()
			switch {
			case dir == "workflows" && name == "internal":
				subs, err := os.ReadDir("../workflows/internal")
				if err != nil {
					t.Fatal(err)
				}
				for _, sub := range subs {
					if sub.IsDir() && !strings.Contains(layout, "`workflows/internal/"+sub.Name()+"`") {
						t.Errorf("the layout does not name workflows/internal/%s", sub.Name())
					}
				}
			case dir == "workflows":
				if !slices.Contains(strings.Split(workflowsRow[1], ","), name) {
					t.Errorf("the layout's workflows row does not name %s", name)
				}
			case !strings.Contains(layout, "`internal/"+name+"`"):
				t.Errorf("the layout does not name internal/%s", name)
			}
		}
	}
}

// The README's fuzzing table has a row for every fuzz test, naming its
// package, so a new parser's invariant is written down where people look.
func TestReadmeFuzzTable(t *testing.T) {
	table := readmeSection(t, "\n### Fuzzing\n", "\n\n## ")
	rows := map[string][]string{} // package → targets its rows name
	row := regexp.MustCompile("^\\| ([^|]+) \\| `([^`]+)` \\|")
	for _, line := range strings.Split(table, "\n") {
		if m := row.FindStringSubmatch(line); m != nil {
			rows[m[2]] = append(rows[m[2]], regexp.MustCompile("`(Fuzz[A-Za-z0-9_]+)`").FindAllString(m[1], -1)...)
		}
	}
	fuzzFunc := regexp.MustCompile(`(?m)^func (Fuzz[A-Za-z0-9_]+)\(`)
	err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != ".." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "bin" || d.Name() == "testdata") {
			return filepath.SkipDir // tools, data and corpora: no Go packages of ours
		}
		if d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		pkg := strings.TrimPrefix(filepath.ToSlash(filepath.Dir(path)), "../")
		for _, m := range fuzzFunc.FindAllStringSubmatch(string(src), -1) {
			if !slices.Contains(rows[pkg], "`"+m[1]+"`") {
				t.Errorf("the README's fuzzing table has no row for %s in %s", m[1], pkg)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// readmeSection returns the README's text after start, up to end (or its
// end), failing the test when start is missing.
func readmeSection(t *testing.T, start, end string) string {
	t.Helper()
	data, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(data), start)
	if !ok {
		t.Fatalf("README.md has no %q", strings.TrimSpace(start))
	}
	section, _, _ = strings.Cut(section, end)
	return section
}
