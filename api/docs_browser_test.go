//go:build unix

package api_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/danielgtaylor/huma/v2"

	"github.com/mailyard/mailyard/internal/testenv"
)

// TestDocsRenderOfflineInChromium opens /docs of a running API server in headless
// Chromium, where no host name resolves except 127.0.0.1, and checks that the
// rendered page lists every operation of the OpenAPI document by its summary.
//
// The test drives Chromium over the DevTools protocol and records every request
// the page makes: one for anything but the API server's own origin (a CDN script,
// a web font) fails the test, and so does any error in the page's log (a
// Content-Security-Policy violation, a failed load, a Subresource Integrity
// mismatch) or an uncaught exception. Requests Chromium makes for itself
// (component updates and the like) are not the page's and are not counted;
// they fail to resolve.
//
// Elements opens one tag group of its sidebar at a time, the group of the
// operation in the URL; the test follows a link to each tag's first operation,
// as a reader would, and then expects all of that tag's operations listed.
func TestDocsRenderOfflineInChromium(t *testing.T) {
	chromium := findChromium(t)
	h := newHarness(t)
	b := startChromium(t, chromium)

	byTag := operationsByTag(h.api.OpenAPI())
	tags := make([]string, 0, len(byTag))
	for tag := range byTag {
		tags = append(tags, tag)
	}
	sort.Strings(tags)
	if len(tags) == 0 {
		t.Fatal("the OpenAPI document has no tagged operations")
	}

	b.navigate(h.srv.URL + "/docs")
	b.waitForTexts("the API's title", []string{"Mailyard", "Endpoints"})
	listed := map[string]bool{}
	for _, tag := range tags {
		ops := byTag[tag]
		var summaries []string
		for _, op := range ops {
			summaries = append(summaries, op.Summary)
			listed[op.Summary] = true
		}
		b.eval(fmt.Sprintf("location.hash = %q", "#/operations/"+ops[0].OperationID))
		b.waitForTexts("the operations tagged "+tag, summaries)
	}
	// The summaries the issue names, so that renaming every operation cannot
	// make this test pass vacuously.
	for _, want := range []string{"List domains", "Add domain", "Create webhook", "List credentials"} {
		if !listed[want] {
			t.Errorf("%q is not an operation summary any more", want)
		}
	}

	requests, problems := b.record()
	var foreign []string
	var gotScript, gotDocument bool
	for _, u := range requests {
		switch {
		case strings.HasPrefix(u, "data:"):
		case strings.HasPrefix(u, h.srv.URL+"/"):
			gotScript = gotScript || strings.HasPrefix(u, h.srv.URL+"/docs/assets/") && strings.HasSuffix(u, ".js")
			gotDocument = gotDocument || u == h.srv.URL+"/openapi.json"
		default:
			foreign = append(foreign, u)
		}
	}
	if len(foreign) > 0 {
		t.Errorf("the page fetched from other origins: %q", foreign)
	}
	// Proof that the recording saw the page's requests at all.
	if !gotScript || !gotDocument {
		t.Errorf("the recorded requests lack the Elements script or /openapi.json: %q", requests)
	}
	for _, p := range problems {
		t.Errorf("the page reported: %s", p)
	}
}

// findChromium returns the Chromium binary, or fails saying what to install.
func findChromium(t *testing.T) string {
	t.Helper()
	// Debian's /usr/bin/chromium is a launcher script that adds flags of its own
	// (remote extensions, which then update themselves); the browser behind it
	// takes only the flags given here.
	candidates := []string{"/usr/lib/chromium/chromium", "chromium", "chromium-browser", "google-chrome", "google-chrome-stable"}
	for _, name := range candidates {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatal("this test renders /docs in headless Chromium and found none on PATH: install it " +
		"(Debian/Ubuntu: apt-get install -y chromium; .ci/run does this in CI)")
	return ""
}

// browser is a headless Chromium driven over the DevTools protocol through
// --remote-debugging-pipe: JSON messages, each ended by a NUL byte, on the
// child's file descriptors 3 (to the browser) and 4 (from it).
type browser struct {
	t       *testing.T
	ctx     context.Context
	stderr  *testenv.SyncBuffer
	session string // the page's DevTools session

	writeMu sync.Mutex
	toPipe  *os.File

	mu       sync.Mutex
	nextID   int
	pending  map[int]chan cdpMessage
	requests []string
	problems []string
}

type cdpMessage struct {
	ID        int             `json:"id,omitempty"`
	SessionID string          `json:"sessionId,omitempty"`
	Method    string          `json:"method,omitempty"`
	Params    json.RawMessage `json:"params,omitempty"`
	Result    json.RawMessage `json:"result,omitempty"`
	Error     *struct {
		Message string `json:"message"`
	} `json:"error,omitempty"`
}

func startChromium(t *testing.T, chromium string) *browser {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	toChromeR, toChromeW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	fromChromeR, fromChromeW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, chromium,
		"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--disable-extensions", "--no-default-browser-check",
		"--user-data-dir="+t.TempDir(),
		// No network but the API server: every other name fails to resolve.
		"--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
		"--remote-debugging-pipe", "about:blank")
	cmd.ExtraFiles = []*os.File{toChromeR, fromChromeW}
	b := &browser{t: t, ctx: ctx, stderr: &testenv.SyncBuffer{}, toPipe: toChromeW, pending: map[int]chan cdpMessage{}}
	cmd.Stderr = b.stderr
	// Chromium starts helper processes: end the whole group when done.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", chromium, err)
	}
	toChromeR.Close()
	fromChromeW.Close()
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
		toChromeW.Close()
		fromChromeR.Close()
	})
	go b.read(fromChromeR)

	var target struct{ TargetID string }
	b.call("", "Target.createTarget", map[string]any{"url": "about:blank"}, &target)
	var attached struct{ SessionID string }
	b.call("", "Target.attachToTarget", map[string]any{"targetId": target.TargetID, "flatten": true}, &attached)
	b.session = attached.SessionID
	for _, m := range []string{"Network.enable", "Log.enable", "Runtime.enable", "Page.enable"} {
		b.call(b.session, m, nil, nil)
	}
	// Workers the page might start are attached paused, so that their requests
	// are recorded from the first one.
	b.call(b.session, "Target.setAutoAttach", map[string]any{"autoAttach": true, "waitForDebuggerOnStart": true, "flatten": true}, nil)
	return b
}

// read dispatches the browser's messages: replies to their caller, events to
// the recording.
func (b *browser) read(pipe *os.File) {
	r := bufio.NewReader(pipe)
	for {
		raw, err := r.ReadBytes(0)
		if err != nil {
			return
		}
		var m cdpMessage
		if err := json.Unmarshal(raw[:len(raw)-1], &m); err != nil {
			continue
		}
		if m.ID != 0 {
			b.mu.Lock()
			ch := b.pending[m.ID]
			delete(b.pending, m.ID)
			b.mu.Unlock()
			if ch != nil {
				ch <- m
			}
			continue
		}
		b.event(m)
	}
}

func (b *browser) event(m cdpMessage) {
	switch m.Method {
	case "Network.requestWillBeSent":
		var p struct{ Request struct{ URL string } }
		_ = json.Unmarshal(m.Params, &p)
		b.mu.Lock()
		b.requests = append(b.requests, p.Request.URL)
		b.mu.Unlock()
	case "Log.entryAdded":
		var p struct {
			Entry struct{ Level, Source, Text, URL string }
		}
		_ = json.Unmarshal(m.Params, &p)
		if p.Entry.Level == "error" {
			b.problem(fmt.Sprintf("%s error: %s (%s)", p.Entry.Source, p.Entry.Text, p.Entry.URL))
		}
	case "Runtime.exceptionThrown":
		var p struct{ ExceptionDetails json.RawMessage }
		_ = json.Unmarshal(m.Params, &p)
		b.problem("uncaught exception: " + string(p.ExceptionDetails))
	case "Network.loadingFailed":
		var p struct{ ErrorText, BlockedReason string }
		_ = json.Unmarshal(m.Params, &p)
		b.problem("a load failed: " + p.ErrorText + " " + p.BlockedReason)
	case "Target.attachedToTarget":
		var p struct{ SessionID string }
		_ = json.Unmarshal(m.Params, &p)
		for _, method := range []string{"Network.enable", "Log.enable", "Runtime.runIfWaitingForDebugger"} {
			b.send(p.SessionID, method, nil)
		}
	}
}

func (b *browser) problem(s string) {
	b.mu.Lock()
	b.problems = append(b.problems, s)
	b.mu.Unlock()
}

// send writes a command and returns its id without waiting for the reply.
func (b *browser) send(session, method string, params any) (int, chan cdpMessage) {
	b.mu.Lock()
	b.nextID++
	id := b.nextID
	ch := make(chan cdpMessage, 1)
	b.pending[id] = ch
	b.mu.Unlock()
	msg, err := json.Marshal(map[string]any{"id": id, "sessionId": session, "method": method, "params": orEmpty(params)})
	if err == nil {
		b.writeMu.Lock()
		_, err = b.toPipe.Write(append(msg, 0))
		b.writeMu.Unlock()
	}
	if err != nil {
		b.problem(method + ": " + err.Error())
	}
	return id, ch
}

// call sends a command and decodes its result into out (when not nil).
func (b *browser) call(session, method string, params, out any) {
	b.t.Helper()
	_, ch := b.send(session, method, params)
	select {
	case m := <-ch:
		if m.Error != nil {
			b.t.Fatalf("DevTools %s: %s", method, m.Error.Message)
		}
		if out != nil {
			if err := json.Unmarshal(m.Result, out); err != nil {
				b.t.Fatalf("DevTools %s: %v", method, err)
			}
		}
	case <-b.ctx.Done():
		b.t.Fatalf("DevTools %s: no answer from Chromium: %v\n%s", method, b.ctx.Err(), b.stderr.String())
	}
}

func orEmpty(params any) any {
	if params == nil {
		return map[string]any{}
	}
	return params
}

func (b *browser) navigate(url string) {
	b.t.Helper()
	var res struct{ ErrorText string }
	b.call(b.session, "Page.navigate", map[string]any{"url": url}, &res)
	if res.ErrorText != "" {
		b.t.Fatalf("navigating to %s: %s", url, res.ErrorText)
	}
}

// eval runs a JavaScript expression in the page and returns its JSON value.
func (b *browser) eval(expr string) json.RawMessage {
	b.t.Helper()
	var res struct {
		Result           struct{ Value json.RawMessage }
		ExceptionDetails json.RawMessage
	}
	b.call(b.session, "Runtime.evaluate", map[string]any{"expression": expr, "returnByValue": true}, &res)
	if len(res.ExceptionDetails) > 0 {
		b.t.Fatalf("evaluating %s: %s", expr, res.ExceptionDetails)
	}
	return res.Result.Value
}

// leafTexts is the trimmed text of every element without child elements: the
// sidebar's entries, headings, labels.
const leafTexts = `Array.from(document.querySelectorAll("body *"))
	.filter(e => e.childElementCount === 0 && e.offsetParent !== null)
	.map(e => e.textContent.trim()).filter(s => s !== "")`

// waitForTexts waits until every one of want is the whole text of a visible
// element of the page.
func (b *browser) waitForTexts(what string, want []string) {
	b.t.Helper()
	deadline := time.Now().Add(45 * time.Second)
	var texts []string
	for {
		texts = nil
		_ = json.Unmarshal(b.eval(leafTexts), &texts)
		missing := slices.DeleteFunc(slices.Clone(want), func(w string) bool { return slices.Contains(texts, w) })
		if len(missing) == 0 {
			return
		}
		if time.Now().After(deadline) {
			requests, problems := b.record()
			b.t.Fatalf("the page does not show %s: missing %q\npage texts: %q\npage problems: %q\npage requests: %q", what, missing, texts, problems, requests)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// record returns the URLs the page requested and the problems it reported.
func (b *browser) record() (requests, problems []string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.requests), slices.Clone(b.problems)
}

// operationsByTag groups the document's operations by their first tag, each
// group in path order.
func operationsByTag(doc *huma.OpenAPI) map[string][]*huma.Operation {
	paths := make([]string, 0, len(doc.Paths))
	for p := range doc.Paths {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	out := map[string][]*huma.Operation{}
	for _, p := range paths {
		item := doc.Paths[p]
		for _, op := range []*huma.Operation{item.Get, item.Put, item.Post, item.Delete, item.Patch} {
			if op == nil || len(op.Tags) == 0 {
				continue
			}
			out[op.Tags[0]] = append(out[op.Tags[0]], op)
		}
	}
	return out
}
