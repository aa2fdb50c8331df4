package fp

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
)

// fp sits at the bottom of the import graph: capture, kernels, session, engine and the UI import it, so it may
// import nothing of bitalign.
func TestImportsNothingOfBitalign(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil || len(files) == 0 {
		t.Fatalf("no sources: %v", err)
	}
	for _, name := range files {
		f, err := parser.ParseFile(token.NewFileSet(), name, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			if p := strings.Trim(imp.Path.Value, `"`); p == "bitalign" || strings.HasPrefix(p, "bitalign/") {
				t.Errorf("%s imports %s", name, p)
			}
		}
	}
}
