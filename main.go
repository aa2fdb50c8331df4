// Command bitalign finds where an ML trainer and its inference sampler stop computing bit-identical numbers.
//
//	bitalign                          open the interactive debugger on the built-in demo
//	bitalign open TRAINER SAMPLER     open two captures in the debugger
//	bitalign diff A B                 compare two captures headlessly (exit 0 identical, 1 divergent, 2 error)
//	bitalign demo --out DIR           write a demo checkpoint and trainer/sampler captures
//	bitalign replay --checkpoint DIR --capture FILE
//	                                  re-execute a captured step with the deterministic engine
//
// The commands only parse flags and call the session core (package session), which opens, checks and diffs
// captures the same way for every command; the TUI (package ui) is handed the loaded session.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"

	"github.com/spf13/cobra"
)

// exitError carries a process exit status through cobra's error return.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string {
	if e.err == nil {
		return ""
	}
	return e.err.Error()
}

func (e *exitError) Unwrap() error { return e.err }

// usageErr marks bad usage or bad input: exit status 2.
func usageErr(format string, args ...any) error {
	return &exitError{code: 2, err: fmt.Errorf(format, args...)}
}

// inputErr wraps an error reading user input: exit status 2.
func inputErr(err error) error {
	if err == nil {
		return nil
	}
	return &exitError{code: 2, err: err}
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	root := newRootCmd()
	err := root.ExecuteContext(ctx)
	if err == nil {
		return
	}
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.err != nil {
			fmt.Fprintln(os.Stderr, "bitalign:", ee.err)
		}
		os.Exit(ee.code)
	}
	// cobra's own errors (unknown flag, wrong argument count) are usage errors.
	fmt.Fprintln(os.Stderr, "bitalign:", err)
	os.Exit(2)
}

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "bitalign",
		Short: "Find where a trainer and a sampler stop computing bit-identical numbers",
		Long: `bitalign compares forward-pass captures of an ML trainer and its inference sampler bit for bit,
finds the first divergence, and replays ops with deterministic, batch-invariant kernels.

With no arguments it opens the interactive debugger on the built-in demo.`,
		Args:          cobra.NoArgs,
		Version:       versionString(),
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetVersionTemplate("{{.Version}}\n")
	var demo tuiArgs
	root.RunE = func(cmd *cobra.Command, args []string) error { return runDemoTUI(cmd, demo) }
	addDemoFlags(root, &demo)
	root.AddCommand(newOpenCmd(), newDiffCmd(), newDemoCmd(), newReplayCmd(), newAuditCmd(), newFingerprintCmd(), newDevicesCmd(), newVersionCmd())
	return root
}
