package capture

import (
	"github.com/apache/arrow-go/v18/arrow"
)

// Schema-level metadata keys of a capture file (docs/capture-format.md).
const (
	KeyFormat  = "bitalign.format"  // always FormatName
	KeyVersion = "bitalign.version" // the format version, decimal ("1")
	KeyMeta    = "bitalign.meta"    // Meta as JSON
	// KeyPad is record-batch (message) custom metadata whose value is spaces; our writer sizes it so that the
	// tensor bytes start on an Alignment boundary of the file. Readers ignore it.
	KeyPad = "bitalign.pad"
)

const (
	FormatName    = "bitalign-capture" // value of KeyFormat
	FormatVersion = 1                  // the version this package writes and reads
	// Alignment is the file-offset alignment of every tensor's bytes in files this package writes.
	Alignment = 64
)

// Column names, in the order our writer lays them out. Readers find columns by name.
const (
	colData       = "data"
	colStep       = "step"
	colSeq        = "seq"
	colPos        = "pos"
	colNTok       = "ntok"
	colOp         = "op"
	colIndex      = "index"
	colRole       = "role"
	colDType      = "dtype"
	colShape      = "shape"
	colRank       = "rank"
	colShardDim   = "shard_dim"
	colShardStart = "shard_start"
	colFullShape  = "full_shape"
)

// schemaFields is the column list of a capture; data comes first so that its buffers open each batch body.
func schemaFields() []arrow.Field {
	i64 := arrow.PrimitiveTypes.Int64
	i32 := arrow.PrimitiveTypes.Int32
	str := arrow.BinaryTypes.String
	return []arrow.Field{
		{Name: colData, Type: arrow.BinaryTypes.LargeBinary},
		{Name: colStep, Type: i64},
		{Name: colSeq, Type: i64},
		{Name: colPos, Type: i64},
		{Name: colNTok, Type: i64},
		{Name: colOp, Type: str},
		{Name: colIndex, Type: i32},
		{Name: colRole, Type: str},
		{Name: colDType, Type: str},
		{Name: colShape, Type: arrow.ListOf(i64)},
		{Name: colRank, Type: i32},
		{Name: colShardDim, Type: i32},
		{Name: colShardStart, Type: i64},
		{Name: colFullShape, Type: arrow.ListOf(i64)},
	}
}

// Schema returns the Arrow schema of a capture with the given metadata JSON (see docs/capture-format.md).
// Other writers (tests, tools) can build captures from it with arrow-go's generic API.
func Schema(metaJSON []byte) *arrow.Schema {
	md := arrow.NewMetadata(
		[]string{KeyFormat, KeyVersion, KeyMeta},
		[]string{FormatName, "1", string(metaJSON)},
	)
	return arrow.NewSchema(schemaFields(), &md)
}
