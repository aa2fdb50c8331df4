package capture

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
)

func TestArrowErrors(t *testing.T) {
	good := Tensor{Op: "embed", Role: "out", DType: BF16, Shape: []int64{2, 3}, Shard: NoShard, Data: make([]byte, 12)}
	mod := func(f func(*Tensor)) []Tensor {
		tn := good
		f(&tn)
		return []Tensor{good, tn}
	}
	mj := `{"side":"trainer"}`
	cases := []struct {
		name string
		keys []string
		vals []string
		ts   []Tensor
		want string
	}{
		{"not bitalign", []string{"owner"}, []string{"someone"}, []Tensor{good}, "not a bitalign capture"},
		{"other format", []string{KeyFormat, KeyVersion}, []string{"parquet-ish", "1"}, []Tensor{good}, "not a bitalign capture"},
		{"unknown version", []string{KeyFormat, KeyVersion, KeyMeta}, []string{FormatName, "2", mj}, []Tensor{good}, `unknown format version "2"`},
		{"no version", []string{KeyFormat}, []string{FormatName}, []Tensor{good}, "no bitalign.version"},
		{"bad meta", []string{KeyFormat, KeyVersion, KeyMeta}, []string{FormatName, "1", "{"}, []Tensor{good}, "bad bitalign.meta"},
		{"unknown dtype", nil, nil, mod(func(t *Tensor) { t.Op, t.DType = "x", 77 }), `unknown dtype "dtype(77)"`},
		{"short data", nil, nil, mod(func(t *Tensor) { t.Op, t.Data = "x", t.Data[:10] }), "needs 12 bytes, has 10"},
		{"negative dims", nil, nil, mod(func(t *Tensor) { t.Op, t.Shape = "x", []int64{-2, -3} }), "negative dimension"},
		{"overflow", nil, nil, mod(func(t *Tensor) { t.Op, t.Shape = "x", []int64{1 << 62, 1 << 62} }), "overflows"},
		{"duplicate", nil, nil, mod(func(t *Tensor) {}), "duplicate tensor embed"},
		{"bad shard", nil, nil, mod(func(t *Tensor) { t.Op, t.Shard = "x", Shard{Dim: 5} }), "shard dim 5"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "bad.arrow")
			keys, vals := tc.keys, tc.vals
			if keys == nil {
				keys, vals = []string{KeyFormat, KeyVersion, KeyMeta}, []string{FormatName, "1", mj}
			}
			writeArrow(t, path, arrow.NewMetadata(keys, vals), schemaFields(), 1, tc.ts)
			for _, opts := range [][]OpenOption{nil, {withGenericIndex()}} {
				_, err := Open(path, opts...)
				wantErr(t, err, path, tc.want)
			}
		})
	}
	t.Run("missing column", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "bad.arrow")
		writeArrow(t, path, arrow.NewMetadata([]string{KeyFormat, KeyVersion}, []string{FormatName, "1"}),
			schemaFields()[1:], 1, []Tensor{good})
		_, err := Open(path)
		wantErr(t, err, path, `no "data" column`)
	})
	t.Run("wrong column type", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "bad.arrow")
		fields := schemaFields()
		fields[1].Type = arrow.PrimitiveTypes.Float64
		writeArrow(t, path, arrow.NewMetadata([]string{KeyFormat, KeyVersion}, []string{FormatName, "1"}),
			fields, 1, []Tensor{good})
		_, err := Open(path)
		wantErr(t, err, path, `column "step" has type float64`)
	})
	t.Run("wrong magic", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "bad.arrow")
		if err := os.WriteFile(path, []byte("PAR1 this is not arrow"), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := Open(path)
		wantErr(t, err, path, "wrong magic")
	})
	t.Run("empty file", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "bad.arrow")
		if err := os.WriteFile(path, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := Open(path)
		wantErr(t, err, path, "empty file")
	})
	t.Run("missing", func(t *testing.T) {
		_, err := Open(filepath.Join(t.TempDir(), "nope.arrow"))
		wantErr(t, err, "", "no such file")
	})
}

// openNoPanic indexes the contents b of a file named path as Open does (in memory, to keep the many
// corruption cases fast); any error must carry the file prefix and a successful open must hand out every
// tensor's bytes within the file.
func openNoPanic(t *testing.T, path string, b []byte, opts ...OpenOption) error {
	t.Helper()
	c := &Capture{path: path, cfg: openConfig{mem: defaultAllocator()}}
	for _, o := range opts {
		o(&c.cfg)
	}
	if err := c.addData(path, b, nil); err != nil {
		if !strings.HasPrefix(err.Error(), "capture: "+path+": ") {
			t.Fatalf("error without file prefix: %v", err)
		}
		return err
	}
	for i := 0; i < c.Len(); i++ {
		d, err := c.Data(i)
		if err != nil {
			t.Fatal(err)
		}
		if int64(len(d)) != c.Entry(i).NBytes {
			t.Fatalf("tensor %d: %d bytes, entry says %d", i, len(d), c.Entry(i).NBytes)
		}
	}
	return nil
}

func TestArrowTruncatedEverywhere(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "c.arrow")
	if err := WriteAll(src, testMeta("trainer", 0), allDTypeTensors(10, 2)); err != nil {
		t.Fatal(err)
	}
	full, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "cut.arrow")
	step := 1
	if testing.Short() {
		step = 13
	}
	for n := 0; n < len(full); n += step {
		for _, opts := range [][]OpenOption{nil, {withGenericIndex()}} {
			if err := openNoPanic(t, path, full[:n:n], opts...); err == nil {
				t.Fatalf("file truncated to %d of %d bytes opened without error", n, len(full))
			}
		}
	}
}

// Flipping any byte outside tensor data gives an error or a consistent capture, never a panic.
func TestArrowFlippedBytes(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "c.arrow")
	ts := allDTypeTensors(11, 1)
	if err := WriteAll(src, testMeta("trainer", 0), ts); err != nil {
		t.Fatal(err)
	}
	full, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	c, err := Open(src)
	if err != nil {
		t.Fatal(err)
	}
	isData := make([]bool, len(full))
	for i := 0; i < c.Len(); i++ {
		e := c.Entry(i)
		for j := e.Offset; j < e.Offset+e.NBytes; j++ {
			isData[j] = true
		}
	}
	c.Close()
	path := filepath.Join(dir, "flip.arrow")
	errs, tried := 0, 0
	for i := range full {
		if isData[i] || (testing.Short() && i%7 != 0) {
			continue
		}
		for _, x := range []byte{0x01, 0xff} {
			b := append([]byte(nil), full...)
			b[i] ^= x
			for _, opts := range [][]OpenOption{nil, {withGenericIndex()}} {
				tried++
				if openNoPanic(t, path, b, opts...) != nil {
					errs++
				}
			}
		}
	}
	t.Logf("%d of %d corrupted opens failed cleanly, the rest opened consistently", errs, tried)
	if errs == 0 {
		t.Fatal("no flipped byte was detected")
	}
}
