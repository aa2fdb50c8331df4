package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"bitalign/engine"
	"bitalign/internal/atomicfile"
	"bitalign/kernels"
	"bitalign/session"
	"bitalign/session/view"
)

// reportFlags are the flags of a command that writes a report: -o FILE, --format and --overwrite.
type reportFlags struct {
	out, format string
	overwrite   bool
}

func (f *reportFlags) add(cmd *cobra.Command) {
	cmd.Flags().StringVarP(&f.out, "output", "o", "", "write the report to FILE (atomically) instead of stdout")
	cmd.Flags().StringVar(&f.format, "format", "", "report format: "+strings.Join(view.ReportFormats, ", ")+
		" (default: from the -o file's extension, else text)")
	cmd.Flags().BoolVar(&f.overwrite, "overwrite", false, "replace the -o file if it exists")
	completeWords(cmd, "format", view.ReportFormats...)
}

// resolve checks the flags before any work: the format (given, or inferred from -o's extension by
// view.FormatOf, the rule the TUI's export follows) and that -o may be written.
func (f *reportFlags) resolve(command string) error {
	switch {
	case f.format != "":
		ok := false
		for _, n := range view.ReportFormats {
			ok = ok || n == f.format
		}
		if !ok {
			return usageErr("%s: unknown --format %q (%s)", command, f.format, strings.Join(view.ReportFormats, ", "))
		}
	case f.out != "":
		format, err := view.FormatOf(f.out)
		if err != nil {
			return usageErr("%s: -o %v, or pass --format", command, err)
		}
		f.format = format
	default:
		f.format = "text"
	}
	if f.out != "" && !f.overwrite {
		if _, err := os.Lstat(f.out); err == nil {
			return usageErr("%s: %s exists; pass --overwrite to replace it", command, f.out)
		}
	}
	return nil
}

// write writes r to stdout, or atomically to -o (internal/atomicfile: a crash never leaves a half-written
// file under the final name, and without --overwrite an existing file is never replaced).
func (f *reportFlags) write(cmd *cobra.Command, r *session.Report) error {
	return f.writeWith(cmd, func(w io.Writer) error { return session.WriteReport(w, r, f.format) })
}

// writeWith writes what fill writes (in f.format) as write does.
func (f *reportFlags) writeWith(cmd *cobra.Command, fill func(io.Writer) error) error {
	if f.out == "" {
		return fill(cmd.OutOrStdout())
	}
	if err := atomicfile.Write(f.out, f.overwrite, fill); err != nil {
		if errors.Is(err, atomicfile.ErrExist) {
			return usageErr("%s exists; pass --overwrite to replace it", f.out)
		}
		return inputErr(fmt.Errorf("%s: %w", f.out, err))
	}
	fmt.Fprintf(cmd.ErrOrStderr(), "bitalign: wrote the %s report to %s\n", f.format, f.out)
	return nil
}

// completeWords makes the shell complete flag's values from words.
func completeWords(cmd *cobra.Command, flag string, words ...string) {
	cmd.RegisterFlagCompletionFunc(flag, func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		return words, cobra.ShellCompDirectiveNoFileComp
	})
}

func addDeviceFlag(cmd *cobra.Command, device *string, what string) {
	cmd.Flags().StringVar(device, "device", "auto", what+" device: "+strings.Join(engine.Devices, ", ")+
		" (auto: the GPU when one is usable)")
	completeWords(cmd, "device", engine.Devices...)
}

func addProfileFlag(cmd *cobra.Command, profile *string, what string) {
	var names []string
	for _, p := range kernels.Profiles {
		names = append(names, p.String())
	}
	cmd.Flags().StringVar(profile, "profile", names[0], what+": "+strings.Join(names, ", ")+
		" (tc: tensor-core matmuls and attention, bf16 models only)")
	completeWords(cmd, "profile", names...)
}

func addFaultFlag(cmd *cobra.Command, fault *string, usage string) {
	cmd.Flags().StringVar(fault, "fault", "", usage)
	names := []string{"none"}
	for _, f := range engine.Faults() {
		names = append(names, f.Name)
	}
	completeWords(cmd, "fault", names...)
}

// progressBar draws the core's progress on stderr when it is a terminal (a no-op otherwise); done clears it.
type progressBar struct {
	f    *os.File
	last string
}

func newProgressBar(cmd *cobra.Command) *progressBar {
	if f, ok := cmd.ErrOrStderr().(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		return &progressBar{f: f}
	}
	return &progressBar{}
}

func (p *progressBar) update(pr view.Progress) {
	if p.f == nil {
		return
	}
	line := pr.Stage
	if pr.Total > 0 {
		pct := int(pr.Done * 100 / pr.Total)
		const width = 30
		n := pct * width / 100
		line = fmt.Sprintf("%s [%s%s] %3d%%", pr.Stage, strings.Repeat("█", n), strings.Repeat("·", width-n), pct)
	}
	if line == p.last {
		return
	}
	p.last = line
	fmt.Fprintf(p.f, "\r\033[K%s", line)
}

func (p *progressBar) done() {
	if p.f != nil && p.last != "" {
		fmt.Fprint(p.f, "\r\033[K")
	}
}
