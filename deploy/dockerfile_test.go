package deploy

import (
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// goBuild is one `go build` command line: its environment assignments, flags,
// output and package.
type goBuild struct {
	env    map[string]string
	flags  map[string]string // -trimpath → "true", -tags → "a,b", -ldflags → "-s -w"
	output string
	pkg    string
}

// shellWords splits a command line as a POSIX shell does for the simple cases the
// Makefile and Dockerfile use: blanks separate, quotes group.
func shellWords(s string) []string {
	var words []string
	var cur strings.Builder
	var quote rune
	inWord := false
	for _, r := range s {
		switch {
		case quote != 0 && r == quote:
			quote = 0
		case quote != 0:
			cur.WriteRune(r)
		case r == '"' || r == '\'':
			quote, inWord = r, true
		case r == ' ' || r == '\t':
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		default:
			cur.WriteRune(r)
			inWord = true
		}
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words
}

// parseGoBuild finds the `go build` in a shell line (after any VAR=value).
func parseGoBuild(line string) (*goBuild, error) {
	words := shellWords(line)
	b := &goBuild{env: map[string]string{}, flags: map[string]string{}}
	i := 0
	for ; i < len(words) && strings.Contains(words[i], "=") && !strings.HasPrefix(words[i], "-"); i++ {
		k, v, _ := strings.Cut(words[i], "=")
		b.env[k] = v
	}
	if i+1 >= len(words) || (words[i] != "go" && words[i] != "$(GO)") || words[i+1] != "build" {
		return nil, fmt.Errorf("%q is not a go build", line)
	}
	for i += 2; i < len(words); i++ {
		w := words[i]
		if !strings.HasPrefix(w, "-") {
			if b.pkg != "" {
				return nil, fmt.Errorf("%q builds more than one package", line)
			}
			b.pkg = w
			continue
		}
		name, val, hasVal := strings.Cut(strings.TrimPrefix(strings.TrimPrefix(w, "-"), "-"), "=")
		switch {
		case hasVal:
		case name == "o" || name == "tags" || name == "ldflags" || name == "gcflags" || name == "mod":
			if i+1 >= len(words) {
				return nil, fmt.Errorf("%q: -%s without a value", line, name)
			}
			i++
			val = words[i]
		default:
			val = "true"
		}
		if name == "o" {
			b.output = val
		} else {
			b.flags[name] = val
		}
	}
	return b, nil
}

// makeBuild returns the go build of the Makefile's build target.
func makeBuild(makefile string) (*goBuild, error) {
	lines := strings.Split(makefile, "\n")
	for i, l := range lines {
		if !strings.HasPrefix(l, "build:") {
			continue
		}
		for _, r := range lines[i+1:] {
			if !strings.HasPrefix(r, "\t") {
				break
			}
			if strings.Contains(r, " build ") {
				return parseGoBuild(strings.TrimSpace(r))
			}
		}
	}
	return nil, fmt.Errorf("the Makefile has no build target running go build")
}

// dockerInstruction is one instruction, line continuations joined.
type dockerInstruction struct{ cmd, args string }

func parseDockerfile(text string) []dockerInstruction {
	var out []dockerInstruction
	var cur string
	for _, line := range strings.Split(text, "\n") {
		t := strings.TrimSpace(line)
		if cur == "" && (t == "" || strings.HasPrefix(t, "#")) {
			continue
		}
		if strings.HasSuffix(t, "\\") {
			cur += strings.TrimSuffix(t, "\\") + " "
			continue
		}
		cur += t
		cmd, args, _ := strings.Cut(cur, " ")
		out = append(out, dockerInstruction{strings.ToUpper(cmd), strings.TrimSpace(args)})
		cur = ""
	}
	return out
}

// checkDockerfile checks that the image is built with the same go build as
// `make build` (same package, tags, cgo setting and -trimpath; only the output and
// symbol stripping may differ), with the Go release go.mod asks for, and that the
// final image runs the binary it copied.
func checkDockerfile(dockerfile, makefile, gomod string) []error {
	want, err := makeBuild(makefile)
	if err != nil {
		return []error{err}
	}
	var errs []error
	var got *goBuild
	var stage, buildStage, goImage, copied, final string
	env := map[string]string{}
	for _, in := range parseDockerfile(dockerfile) {
		switch in.cmd {
		case "FROM":
			f := strings.Fields(in.args)
			final, stage = f[0], ""
			if len(f) == 3 && strings.EqualFold(f[1], "AS") {
				stage = f[2]
			}
			env = map[string]string{}
		case "ENV", "ARG":
			for _, w := range shellWords(in.args) {
				if k, v, ok := strings.Cut(w, "="); ok {
					env[k] = v
				}
			}
		case "RUN":
			for _, part := range strings.Split(in.args, "&&") {
				if b, err := parseGoBuild(strings.TrimSpace(part)); err == nil {
					for k, v := range env {
						if _, ok := b.env[k]; !ok {
							b.env[k] = v
						}
					}
					got, buildStage, goImage = b, stage, final
				}
			}
		case "COPY":
			w := strings.Fields(in.args)
			if got != nil && len(w) == 3 && w[0] == "--from="+buildStage && w[1] == got.output {
				copied = w[2]
			}
		case "ENTRYPOINT":
			if copied == "" || in.args != fmt.Sprintf("[%q]", copied) {
				errs = append(errs, fmt.Errorf("ENTRYPOINT %s is not the binary built by go build (%q)", in.args, copied))
			}
		}
	}
	if got == nil {
		return append(errs, fmt.Errorf("the Dockerfile runs no go build"))
	}
	if got.pkg != want.pkg {
		errs = append(errs, fmt.Errorf("the Dockerfile builds %s, make build builds %s", got.pkg, want.pkg))
	}
	if got.env["CGO_ENABLED"] != want.env["CGO_ENABLED"] {
		errs = append(errs, fmt.Errorf("CGO_ENABLED=%q in the Dockerfile, %q in make build", got.env["CGO_ENABLED"], want.env["CGO_ENABLED"]))
	}
	if strings.Contains(final, "distroless/static") && got.env["CGO_ENABLED"] != "0" {
		errs = append(errs, fmt.Errorf("the final image %s has no C library: build with CGO_ENABLED=0", final))
	}
	for _, name := range unionKeys(got.flags, want.flags) {
		if name == "ldflags" && onlyStripping(got.flags[name]) && onlyStripping(want.flags[name]) {
			continue // -s -w drop the symbol table and DWARF: the same program, smaller
		}
		if got.flags[name] != want.flags[name] {
			errs = append(errs, fmt.Errorf("-%s is %q in the Dockerfile, %q in make build", name, got.flags[name], want.flags[name]))
		}
	}
	if m := regexp.MustCompile(`(?m)^go (\d+\.\d+)`).FindStringSubmatch(gomod); m == nil || !strings.HasPrefix(goImage, "golang:"+m[1]) {
		errs = append(errs, fmt.Errorf("the build stage %s is not the Go release of go.mod (%v)", goImage, m))
	}
	return errs
}

func onlyStripping(ldflags string) bool {
	for _, f := range strings.Fields(ldflags) {
		if f != "-s" && f != "-w" {
			return false
		}
	}
	return true
}

func unionKeys(a, b map[string]string) []string {
	var keys []string
	for k := range a {
		keys = append(keys, k)
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	return keys
}

func readFiles(t *testing.T, names ...string) []string {
	var out []string
	for _, n := range names {
		b, err := os.ReadFile(n)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, string(b))
	}
	return out
}

func TestDockerfileBuildsWhatMakeBuilds(t *testing.T) {
	f := readFiles(t, "Dockerfile", "../Makefile", "../go.mod")
	for _, err := range checkDockerfile(f[0], f[1], f[2]) {
		t.Error(err)
	}
	// The image cannot be built here (no container engine), so prove the part that
	// could break it: with the Dockerfile's cgo setting every package of the binary
	// still builds (a cgo-only dependency would fail here).
	b, err := parseGoBuild(regexp.MustCompile(`(?m)^RUN (.*go build.*)$`).FindStringSubmatch(f[0])[1])
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "list", "-e", "-deps", "-f", "{{if .Error}}{{.ImportPath}}: {{.Error}}{{end}}", b.pkg)
	cmd.Dir = ".."
	cmd.Env = append(os.Environ(), "CGO_ENABLED="+b.env["CGO_ENABLED"])
	out, err := cmd.CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "" {
		t.Fatalf("go list with CGO_ENABLED=%s: %v\n%s", b.env["CGO_ENABLED"], err, out)
	}
}

func TestDockerfileChecksCatchMistakes(t *testing.T) {
	f := readFiles(t, "Dockerfile", "../Makefile", "../go.mod")
	for name, c := range map[string]struct{ old, new, want string }{
		"other package": {" ./cmd/mailyard", " ./cmd/other", "the Dockerfile builds ./cmd/other"},
		"build tags":    {" -trimpath", " -trimpath -tags netgo", `-tags is "netgo" in the Dockerfile`},
		"cgo":           {"CGO_ENABLED=0 go build", "CGO_ENABLED=1 go build", "has no C library"},
		"entrypoint":    {`ENTRYPOINT ["/usr/local/bin/mailyard"]`, `ENTRYPOINT ["/bin/mailyard"]`, "is not the binary built"},
		"go release":    {"FROM golang:1.", "FROM golang:0.", "is not the Go release of go.mod"},
	} {
		if !strings.Contains(f[0], c.old) {
			t.Fatalf("%s: %q is not in the Dockerfile any more; update this test", name, c.old)
		}
		errs := checkDockerfile(strings.Replace(f[0], c.old, c.new, 1), f[1], f[2])
		if !strings.Contains(fmt.Sprint(errs), c.want) {
			t.Errorf("%s: %v, want %q", name, errs, c.want)
		}
	}
}
