package ui

import (
	"context"
	"errors"
	"io"
	"time"

	tea "charm.land/bubbletea/v2"

	"bitalign/session/view"
)

// Options say what Run shows.
type Options struct {
	Load  view.Loader // the session: the core builds it (session.Load); it may still be loading
	Title string      // names what is open, e.g. "trainer ↔ sampler"

	// Input and Output replace the terminal (tests); nil uses stdin/stdout.
	Input  io.Reader
	Output io.Writer
}

// Run runs the TUI on the session o.Load gives until the user quits. A slow loader runs in the background
// behind a progress screen; its error is shown there and returned when the user quits.
func Run(ctx context.Context, o Options) error {
	if o.Load == nil {
		return errors.New("ui: no session to show")
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // quitting stops loading, diffing and replays still running
	m := New(ctx, o.Load, o.Title)
	opts := []tea.ProgramOption{tea.WithContext(ctx)}
	if o.Input != nil {
		opts = append(opts, tea.WithInput(o.Input))
	}
	if o.Output != nil {
		opts = append(opts, tea.WithOutput(o.Output))
	}
	_, err := tea.NewProgram(m, opts...).Run()
	cancel()
	// close the captures only once no background command can still be reading them
	if c, ok := m.src.(io.Closer); ok && m.Wait(3*time.Second) {
		c.Close()
	}
	if errors.Is(err, tea.ErrProgramKilled) && ctx.Err() != nil {
		return nil // cancelled from outside: a clean exit
	}
	if err == nil && m.loadErr != nil {
		return m.loadErr
	}
	return err
}
