package ui

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// tmuxScreen drives a program in a detached tmux session of its own server.
type tmuxScreen struct {
	t      *testing.T
	socket string
	name   string // the tmux session the screen reads and types into
}

func (s *tmuxScreen) tmux(args ...string) (string, error) {
	out, err := exec.Command("tmux", append([]string{"-L", s.socket}, args...)...).CombinedOutput()
	return string(out), err
}

func (s *tmuxScreen) capture() string {
	out, _ := s.tmux("capture-pane", "-p", "-t", s.name)
	return out
}

// waitFor waits until the screen contains want.
func (s *tmuxScreen) waitFor(want string, timeout time.Duration) string {
	s.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		screen := s.capture()
		if strings.Contains(screen, want) {
			return screen
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("after %v the screen does not show %q:\n%s", timeout, want, screen)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (s *tmuxScreen) keys(k ...string) {
	s.t.Helper()
	if out, err := s.tmux(append([]string{"send-keys", "-t", s.name}, k...)...); err != nil {
		s.t.Fatalf("send-keys %v: %v %s", k, err, out)
	}
}

// buildBinary builds the bitalign binary.
func buildBinary(t *testing.T) (bin string, args []string) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	bin = filepath.Join(t.TempDir(), "bitalign")
	const pkg = "."
	cmd := exec.Command("go", "build", "-o", bin, pkg)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, out)
	}
	return bin, nil
}

// TestEndToEnd runs the real binary in tmux on the demo: it loads, opens the first divergence, steps, shows
// help, and quits cleanly with the terminal restored.
func TestEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test skipped in -short mode")
	}
	if _, err := exec.LookPath("tmux"); err != nil {
		t.Skip("tmux is not installed: end-to-end test skipped")
	}
	bin, _ := buildBinary(t)
	cache := t.TempDir()
	s := &tmuxScreen{t: t, socket: fmt.Sprintf("bitalign-e2e-%d", os.Getpid()), name: "e2e"}
	t.Cleanup(func() { s.tmux("kill-server") })
	// the shell prints the exit status and waits, so the final screen can be read
	script := fmt.Sprintf("XDG_CACHE_HOME=%s TERM=xterm-256color %s; echo EXIT=$?; sleep 60", cache, bin)
	if out, err := s.tmux("new-session", "-d", "-s", "e2e", "-x", "100", "-y", "30", "sh", "-c", script); err != nil {
		t.Fatalf("tmux new-session: %v %s", err, out)
	}
	screen := s.waitFor("first divergence", 90*time.Second)
	for _, want := range []string{"captures", "trainer", "sampler", "ops"} {
		if !strings.Contains(screen, want) {
			t.Errorf("overview lacks %q:\n%s", want, screen)
		}
	}
	s.keys("Enter")
	screen = s.waitFor("element bits", 10*time.Second)
	title := strings.Split(screen, "\n")[1]
	s.keys("]")
	time.Sleep(300 * time.Millisecond)
	screen = s.waitFor("element bits", 10*time.Second)
	if strings.Split(screen, "\n")[1] == title {
		t.Errorf("] did not step to the next op:\n%s", screen)
	}
	s.keys("?")
	s.waitFor("jump to the first divergence", 10*time.Second)
	s.keys("q")
	screen = s.waitFor("EXIT=", 10*time.Second)
	if !strings.Contains(screen, "EXIT=0") {
		t.Errorf("bitalign did not exit cleanly:\n%s", screen)
	}
	if strings.Contains(screen, "element bits") || strings.Contains(screen, "jump to the first divergence") {
		t.Errorf("the alternate screen was not left on quit:\n%s", screen)
	}
	// the demo is cached for the next run
	if _, err := os.Stat(filepath.Join(cache, "bitalign", "demo")); err != nil {
		t.Errorf("demo not cached: %v", err)
	}

	// second run: ctrl+c from the tensor view quits cleanly too, and a resize re-lays out
	// (the second session starts before the first is killed, so the tmux server never shuts down between them)
	if out, err := s.tmux("new-session", "-d", "-s", "e2e2", "-x", "100", "-y", "30", "sh", "-c", script); err != nil {
		t.Fatalf("tmux new-session: %v %s", err, out)
	}
	s.tmux("kill-session", "-t", "e2e")
	s.name = "e2e2"
	s.waitFor("first divergence", 30*time.Second)
	s.keys("Enter")
	s.waitFor("element bits", 10*time.Second)
	s.tmux("resize-window", "-t", s.name, "-x", "80", "-y", "24")
	screen = s.waitFor("element bits", 10*time.Second)
	for i, l := range strings.Split(strings.TrimRight(screen, "\n"), "\n") {
		if n := len([]rune(l)); n > 80 {
			t.Errorf("after resizing to 80 columns, line %d has %d: %q", i, n, l)
		}
	}
	s.keys("C-c")
	screen = s.waitFor("EXIT=", 10*time.Second)
	if !strings.Contains(screen, "EXIT=0") {
		t.Errorf("ctrl+c did not exit cleanly:\n%s", screen)
	}
}
