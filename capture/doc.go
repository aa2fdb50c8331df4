// Package capture reads and writes bitalign captures: the tensors one side (trainer, sampler, replay)
// recorded during forward passes, with their coordinates (step, sequence, position, op, role, TP rank and
// shard) and metadata. The format is specified in docs/capture-format.md; in short:
//
//   - A capture is an Arrow IPC file (*.arrow) with one record batch per tensor, a directory of such files (one
//     per rank), or a safetensors file (imported read-only, names mapped to coordinates).
//   - Schema metadata: bitalign.format = "bitalign-capture", bitalign.version = "1", bitalign.meta = Meta as
//     JSON. Columns: data (large_binary, first), step, seq, pos, ntok, op, index, role, dtype, shape, rank,
//     shard_dim, shard_start, full_shape.
//   - A fingerprint tensor (role FingerprintPrefix + a role, "fp.out"; i64 [rows]) holds one 64-bit hash per
//     token row of the tensor it stands for (Fingerprint, FingerprintRows, FingerprintTensor), beside it or
//     instead of it; the reader and the writer check its layout.
//   - Files this package writes place every tensor's bytes at a file offset that is a multiple of Alignment
//     (64), using the record batch metadata key KeyPad.
//
// Writing streams one tensor at a time into a temporary file next to the target; Close fsyncs it and makes it
// appear under its final name in one step, never replacing an existing file unless WithOverwrite is given:
//
//	w, err := capture.Create("trainer/rank0.arrow", meta)
//	...
//	err = w.Write(capture.Tensor{Op: "embed", DType: capture.BF16, Shape: []int64{T, H}, Shard: capture.NoShard, Data: b})
//	...
//	err = w.Close() // or w.Abort()
//
// Reading maps the file and reads only its index (the footer, each batch's metadata and small columns): a
// 10 GB capture opens in a fraction of a second. Data returns a zero-copy, read-only view of the mapping,
// valid until Close. A Capture may be read from several goroutines at once; Close must not race with reads.
// If another process truncates a file while it is open, reading the lost pages faults (SIGBUS): captures are
// meant to be immutable once written.
//
// Every error names the file and the problem ("capture: run/rank0.arrow: record batch 7: row 0: embed: shape
// [4 8] × bf16 needs 64 bytes, has 60"). Corrupted input gives an error, never a panic or a hang, and no
// header field can make the reader allocate more than a small multiple of the file's size.
package capture
