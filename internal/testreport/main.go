// Command testreport reads `go test -json` on stdin and prints what a person needs from it: each package's
// ok/FAIL/no-test-files line, the whole output of every failed test, and at the end one line per skipped test
// with the reason it gave, and how many. `make test` pipes the Go tests through it. Its exit status is 1 when
// any test or package failed.
//
//	go test -json ./... | go run ./internal/testreport
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"strings"
)

// event is one line of `go test -json` (test2json).
type event struct {
	Action  string
	Package string
	Test    string
	Output  string
}

type skip struct{ pkg, test, reason string }

func main() {
	outputs := map[[2]string][]string{} // (package, test) → output lines
	var skips []skip
	failed := false
	sc := bufio.NewScanner(os.Stdin)
	sc.Buffer(make([]byte, 1<<20), 1<<26)
	for sc.Scan() {
		var e event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil || e.Action == "" {
			fmt.Println(sc.Text()) // not an event: a build error or a vet message
			continue
		}
		k := [2]string{e.Package, e.Test}
		switch e.Action {
		case "output":
			if e.Test == "" {
				if line := strings.TrimRight(e.Output, "\n"); line != "PASS" && !strings.HasPrefix(line, "=== ") && line != "" {
					fmt.Println(line) // ok, FAIL, "no test files", panics outside a test
				}
				continue
			}
			outputs[k] = append(outputs[k], e.Output)
		case "fail":
			failed = true
			if e.Test != "" {
				fmt.Print(strings.Join(outputs[k], ""))
			}
			delete(outputs, k)
		case "skip":
			if e.Test != "" {
				skips = append(skips, skip{e.Package, e.Test, reason(outputs[k])})
			}
			delete(outputs, k)
		case "pass":
			delete(outputs, k)
		}
	}
	if len(skips) > 0 {
		fmt.Println()
	}
	for _, s := range skips {
		fmt.Printf("SKIP %s %s: %s\n", s.pkg, s.test, s.reason)
	}
	fmt.Printf("%d Go tests skipped\n", len(skips))
	if failed {
		os.Exit(1)
	}
}

// reason is what a skipped test logged, without the framework's own lines.
func reason(lines []string) string {
	var out []string
	for _, l := range lines {
		t := strings.TrimSpace(l)
		if t == "" || strings.HasPrefix(t, "=== ") || strings.HasPrefix(t, "--- SKIP") {
			continue
		}
		// drop the "file_test.go:12: " prefix t.Skip adds
		if i := strings.Index(t, ": "); i > 0 && strings.Contains(t[:i], ".go:") {
			t = t[i+2:]
		}
		out = append(out, t)
	}
	if len(out) == 0 {
		return "(no reason given)"
	}
	return strings.Join(out, " ")
}
