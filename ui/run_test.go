package ui

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"
	"time"
)

// slowReader delivers its keys after a delay, so the program is running when they arrive.
type slowReader struct {
	r    io.Reader
	wait time.Duration
}

func (s *slowReader) Read(p []byte) (int, error) {
	time.Sleep(s.wait)
	s.wait = 0
	return s.r.Read(p)
}

// waitRun fails the test unless Run, started with done as its result, returns nil within limit after what.
func waitRun(t *testing.T, done <-chan error, limit time.Duration, what string) {
	t.Helper()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run after %s: %v", what, err)
		}
	case <-time.After(limit):
		t.Fatalf("Run did not return after %s", what)
	}
}

// TestRun runs the entry point headlessly on the demo: q quits and Run returns nil.
func TestRun(t *testing.T) {
	in := realDemo(t)
	in.Device = "cpu"
	var out bytes.Buffer
	done := make(chan error, 1)
	go func() {
		done <- Run(context.Background(), Options{Load: loaderOf(in), Title: "demo",
			Input: &slowReader{r: strings.NewReader("jq"), wait: 500 * time.Millisecond}, Output: &out})
	}()
	waitRun(t, done, 30*time.Second, "q")
	if !strings.Contains(out.String(), "bitalign") {
		t.Errorf("nothing rendered: %q", out.String())
	}
}

// TestRunCancel: cancelling the context ends Run cleanly.
func TestRunCancel(t *testing.T) {
	in := realDemo(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	pr, pw := io.Pipe()
	defer pw.Close()
	go func() {
		done <- Run(ctx, Options{Load: loaderOf(in), Input: pr, Output: io.Discard})
	}()
	time.Sleep(300 * time.Millisecond)
	cancel()
	waitRun(t, done, 10*time.Second, "cancel")
}
