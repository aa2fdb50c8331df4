// Command tui runs the TUI alone (ui.Run) for end-to-end tests until the bitalign binary wires it:
//
//	tui                       the engine's demo (generated once in the user cache directory)
//	tui TRAINER SAMPLER [-checkpoint DIR]
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"

	"bitalign/ui"
)

func main() {
	ckpt := flag.String("checkpoint", "", "model directory (enables replay)")
	device := flag.String("device", "auto", "replay device: auto, cpu or cuda")
	fault := flag.String("fault", "", "demo fault (none for identical captures)")
	layer := flag.Int("layer", ui.DefaultDemoFaultLayer, "demo fault layer")
	flag.Parse()
	o := ui.Options{Demo: flag.NArg() == 0, Fault: *fault, FaultLayer: *layer, Checkpoint: *ckpt, Device: *device}
	if flag.NArg() == 2 {
		o.TrainerPath, o.SamplerPath = flag.Arg(0), flag.Arg(1)
	} else if flag.NArg() != 0 {
		fmt.Fprintln(os.Stderr, "usage: tui [TRAINER SAMPLER [-checkpoint DIR]]")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := ui.Run(ctx, o); err != nil {
		fmt.Fprintln(os.Stderr, "bitalign:", err)
		os.Exit(1)
	}
}
