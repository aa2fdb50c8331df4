package logprobs

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// FuzzRead: whatever the bytes, Read returns a table or an error naming the file; it never panics or hangs.
// The seeds are the committed fixtures (Parquet by pyarrow and by write_logprobs, JSONL), whole and cut.
func FuzzRead(f *testing.F) {
	for _, name := range []string{"trainer.parquet", "sampler.parquet", "sampler.jsonl"} {
		b, err := os.ReadFile(filepath.Join("..", "testdata", "logprobs", name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
		f.Add(b[:len(b)/2])
		f.Add(append(append([]byte{}, b[:len(b)/3]...), b[2*len(b)/3:]...))
	}
	f.Add([]byte(`{"seq": 1, "logprobs": ["NaN", -1, 2]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(t.TempDir(), "t.bin")
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			tab, err := Read(context.Background(), path, Options{Columns: Columns{Seq: "sample_id,seq", Pos: "position,pos", Logprob: "old_log_prob,logprob"}})
			if err == nil && tab == nil {
				t.Error("no table and no error")
			}
		}()
		select {
		case <-done:
		case <-time.After(10 * time.Second): // seconds for a file of at most a few KiB: a hang
			t.Fatalf("Read of %d bytes still running after 10 s", len(data))
		}
	})
}
