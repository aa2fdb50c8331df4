package session

import (
	"fmt"
	"io"
	"strings"

	"bitalign/session/view"
)

// WriteReport writes r in format, one of view.ReportFormats (which view.FormatOf infers from a file name).
func WriteReport(w io.Writer, r *Report, format string) error {
	return writeAs(w, format, r, WriteText, WriteJSON, WriteMarkdown, WriteHTML)
}

// writeAs writes r with the writer of format, one of view.ReportFormats: text, json, md or html, in that order.
func writeAs[R any](w io.Writer, format string, r R, text, json, md, html func(io.Writer, R) error) error {
	switch format {
	case "text":
		return text(w, r)
	case "json":
		return json(w, r)
	case "md":
		return md(w, r)
	case "html":
		return html(w, r)
	}
	return fmt.Errorf("session: unknown report format %q (%s)", format, strings.Join(view.ReportFormats, ", "))
}
