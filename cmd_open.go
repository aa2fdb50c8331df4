package main

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/spf13/cobra"

	"bitalign/kernels"
	"bitalign/session"
	"bitalign/session/view"
	"bitalign/ui"
)

// tuiArgs are the root command's and `open`'s flags.
type tuiArgs struct {
	fault   string
	layer   int
	ckpt    string
	device  string
	profile string
	force   bool
}

// runUI runs the TUI (a variable so that tests can see whether a command reached it).
var runUI = ui.Run

// runTUI loads the session's verdict in the foreground (every bad input fails here, exit 2, before the
// screen changes), then hands it to the TUI, which shows the verdict first and the complete report when the
// background has made it (session.LoadVerdict).
func runTUI(cmd *cobra.Command, in session.Inputs, title string) error {
	bar := newProgressBar(cmd)
	p, err := session.LoadVerdict(cmd.Context(), in, bar.update)
	bar.done()
	if err != nil {
		return inputErr(err)
	}
	src := p.Source() // closed by ui.Run once nothing reads it any more (which stops the background)
	return runUI(cmd.Context(), ui.Options{Title: title,
		Load: func(context.Context, func(view.Progress)) (view.Source, error) { return src, nil }})
}

// runDemoTUI opens the engine's demo of --fault (default session.DefaultDemoFault), generated once into the
// user cache directory.
func runDemoTUI(cmd *cobra.Command, a tuiArgs) error {
	fault, layer := a.fault, a.layer
	if fault == "" {
		fault = session.DefaultDemoFault
	}
	bar := newProgressBar(cmd)
	in, err := session.DemoInputs(cmd.Context(), "", fault, layer, bar.update)
	bar.done()
	if err != nil {
		return inputErr(err)
	}
	in.Device = a.device
	title := "demo"
	if fault != "none" {
		title = fmt.Sprintf("demo · fault %s (layer %d)", fault, layer)
	}
	return runTUI(cmd, in, title)
}

func addDemoFlags(cmd *cobra.Command, a *tuiArgs) {
	addFaultFlag(cmd, &a.fault, `demo fault to plant (see bitalign demo --list-faults; "none" for identical captures; default `+
		session.DefaultDemoFault+")")
	cmd.Flags().IntVar(&a.layer, "layer", session.DefaultDemoLayer, "layer of a layered demo fault")
	addDeviceFlag(cmd, &a.device, "replay")
}

func newOpenCmd() *cobra.Command {
	var a tuiArgs
	var rl rlFlags
	cmd := &cobra.Command{
		Use:   "open TRAINER SAMPLER",
		Short: "Open two captures in the interactive debugger",
		Long: `Open a trainer and a sampler capture (Arrow files, per-rank directories or safetensors files), or
logprob tables (Parquet, Arrow IPC, JSONL; see bitalign diff), in the interactive debugger. With --checkpoint (a Hugging Face style model directory) ops can be replayed with the
deterministic engine to tell which side departs from the reference.

The captures are opened, checked and diffed before the debugger starts: bad input exits with status 2.`,
		Example: `  bitalign open run/trainer run/sampler --checkpoint run/checkpoint`,
		Args:    cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			rlo, err := rl.options(cmd)
			if err != nil {
				return err
			}
			prof, err := kernels.ParseProfile(a.profile)
			if err != nil {
				return usageErr("open: %v", err)
			}
			in := session.Inputs{A: args[0], B: args[1], Checkpoint: a.ckpt, Device: a.device, Force: a.force, RL: rlo, Profile: prof}
			return runTUI(cmd, in, filepath.Base(args[0])+" ↔ "+filepath.Base(args[1]))
		},
	}
	cmd.Flags().StringVar(&a.ckpt, "checkpoint", "", "model directory (config.json + safetensors): enables replay")
	addDeviceFlag(cmd, &a.device, "replay")
	addProfileFlag(cmd, &a.profile, "kernel profile of the replays")
	cmd.Flags().BoolVar(&a.force, "force", false, "compare captures of different models (what can be compared)")
	rl.add(cmd, false)
	return cmd
}
