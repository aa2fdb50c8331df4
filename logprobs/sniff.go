package logprobs

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/apache/arrow-go/v18/arrow/ipc"

	"bitalign/capture"
)

// Kind is what a file holds, as Sniff tells it from the content.
type Kind uint8

const (
	KindUnknown     Kind = iota
	KindCapture          // a bitalign capture: an Arrow IPC file with bitalign metadata, a directory, or safetensors
	KindParquet          // a Parquet file ("PAR1")
	KindArrowFile        // an Arrow IPC file ("ARROW1") that is not a capture
	KindArrowStream      // an Arrow IPC stream
	KindJSONL            // JSON lines
)

// String names the kind as Table.Format does.
func (k Kind) String() string {
	return [...]string{"unknown", "capture", "parquet", "arrow", "arrow-stream", "jsonl"}[k]
}

// IsTable reports whether the kind is a logprob table.
func (k Kind) IsTable() bool { return k >= KindParquet && k <= KindJSONL }

// PickleHint is the two-line export that turns a torch.save'd file into a table bitalign reads.
const PickleHint = `bitalign never unpickles (a pickle can run any code). Export the tensors to Parquet instead:
    import bitalign_capture as bc
    bc.write_logprobs("sampler.parquet", "sampler", seq_ids, tokens, logprobs)   # torch or numpy arrays`

// ErrNotTable is wrapped by Sniff's error for a file named as a logprob table (.parquet, .jsonl, ...) whose
// content is neither that nor a capture: commands report that instead of trying the file as a capture.
var ErrNotTable = errors.New("neither a bitalign capture nor a logprob table (Parquet, Arrow IPC or JSONL)")

// Sniff tells what path holds from its first bytes (and, for an Arrow IPC file, its schema metadata), not
// from its name. A pickle or a torch.save zip is refused with PickleHint.
func Sniff(path string) (Kind, error) {
	st, err := os.Stat(path)
	if err != nil {
		return KindUnknown, fmt.Errorf("logprobs: %v", err)
	}
	if st.IsDir() {
		return KindCapture, nil
	}
	if !st.Mode().IsRegular() {
		// capture.Open words the refusal of pipes and devices.
		return KindCapture, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return KindUnknown, fmt.Errorf("logprobs: %v", err)
	}
	defer f.Close()
	head := make([]byte, 16)
	n, err := io.ReadFull(f, head)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return KindUnknown, fmt.Errorf("logprobs: %s: %v", path, err)
	}
	head = head[:n]
	ext := strings.ToLower(filepath.Ext(path))
	switch {
	case isPickle(head) || ext == ".pt" || ext == ".pth" || ext == ".pkl" || ext == ".pickle":
		return KindUnknown, fmt.Errorf("logprobs: %s: a pickle (torch.save) file. %s", path, PickleHint)
	case bytes.HasPrefix(head, []byte("PAR1")):
		return KindParquet, nil
	case bytes.HasPrefix(head, []byte("ARROW1")):
		return sniffArrowFile(path, f)
	case len(head) >= 4 && binary.LittleEndian.Uint32(head) == 0xFFFFFFFF:
		return KindArrowStream, nil
	case isSafetensors(head):
		return KindCapture, nil
	}
	if t := bytes.TrimLeft(head, " \t\r\n\xef\xbb\xbf"); len(t) > 0 && t[0] == '{' {
		return KindJSONL, nil
	}
	if n == 0 {
		return KindUnknown, fmt.Errorf("logprobs: %s: empty file", path)
	}
	switch ext {
	case ".parquet", ".pq":
		return KindUnknown, fmt.Errorf("logprobs: %s: not a valid Parquet file (it does not begin with PAR1): %w", path, ErrNotTable)
	case ".jsonl", ".ndjson", ".json":
		return KindUnknown, fmt.Errorf("logprobs: %s: not JSON lines (its first character is not '{'): %w", path, ErrNotTable)
	}
	return KindUnknown, fmt.Errorf("logprobs: %s: %v", path, ErrNotTable)
}

// isPickle: pickle protocol 2–5 ("\x80\x02".."\x80\x05") or the zip torch.save writes since PyTorch 1.6.
func isPickle(h []byte) bool {
	return len(h) >= 2 && h[0] == 0x80 && h[1] >= 2 && h[1] <= 5 || bytes.HasPrefix(h, []byte("PK\x03\x04"))
}

// isSafetensors: an 8-byte little-endian header length, then the JSON header.
func isSafetensors(h []byte) bool {
	return len(h) >= 9 && h[8] == '{' && binary.LittleEndian.Uint64(h) < 1<<30
}

// sniffArrowFile tells a capture from a table by the schema's bitalign.format metadata.
func sniffArrowFile(path string, f *os.File) (Kind, error) {
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return KindUnknown, fmt.Errorf("logprobs: %s: %v", path, err)
	}
	r, err := ipc.NewFileReader(f)
	if err != nil {
		// A truncated or corrupt Arrow file: capture.Open says what is wrong with it.
		return KindCapture, nil
	}
	defer r.Close()
	// Any bitalign.format value is the capture reader's to accept or refuse.
	if r.Schema().Metadata().FindKey(capture.KeyFormat) >= 0 {
		return KindCapture, nil
	}
	return KindArrowFile, nil
}
