package session

import (
	"fmt"
	"io"
	"strings"

	"bitalign/session/view"
)

// WriteReport writes r in format, one of view.ReportFormats (which view.FormatOf infers from a file name).
func WriteReport(w io.Writer, r *Report, format string) error {
	switch format {
	case "text":
		return WriteText(w, r)
	case "json":
		return WriteJSON(w, r)
	case "md":
		return WriteMarkdown(w, r)
	case "html":
		return WriteHTML(w, r)
	}
	return fmt.Errorf("session: unknown report format %q (%s)", format, strings.Join(view.ReportFormats, ", "))
}
