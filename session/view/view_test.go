package view

import "testing"

func TestFormatOf(t *testing.T) {
	for path, want := range map[string]string{"r.md": "md", "r.MARKDOWN": "md", "a/b.json": "json", "r.html": "html",
		"r.htm": "html", "r.txt": "text", "r.xml": "", "report": ""} {
		got, err := FormatOf(path)
		if got != want || (err != nil) != (want == "") {
			t.Errorf("FormatOf(%q) = %q, %v; want %q", path, got, err, want)
		}
	}
	// every format some extension gives
	ext := map[string]string{"text": ".txt", "json": ".json", "md": ".md", "html": ".html"}
	for _, f := range ReportFormats {
		if got, _ := FormatOf("r" + ext[f]); got != f {
			t.Errorf("no extension gives format %s", f)
		}
	}
}
