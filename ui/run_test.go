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
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return after q")
	}
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
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run after cancel: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
}
