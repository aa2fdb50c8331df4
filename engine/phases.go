package engine

import (
	"fmt"
	"io"
	"sync"
	"time"

	"bitalign/internal/rss"
)

// Phases accumulates the wall-clock time of named phases of a run (`bitalign replay --timings`), in the order
// each phase was first reported. Several goroutines may add to it (the recorder's writer runs beside the
// forward); a nil *Phases records nothing, so callers time unconditionally.
type Phases struct {
	mu    sync.Mutex
	names []string
	d     map[string]time.Duration
	n     map[string]int
	bytes map[string]int64
	hwm   map[string]int64 // the process's peak RSS when the phase last ended (Since)
}

// NewPhases returns an empty phase report.
func NewPhases() *Phases {
	return &Phases{d: map[string]time.Duration{}, n: map[string]int{}, bytes: map[string]int64{}, hwm: map[string]int64{}}
}

// Add adds d (and bytes moved, 0 if none) to phase name.
func (p *Phases) Add(name string, d time.Duration, bytes int64) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.d[name]; !ok {
		p.names = append(p.names, name)
	}
	p.d[name] += d
	p.n[name]++
	p.bytes[name] += bytes
}

// Since adds the time since start to phase name and returns now, the start of the next phase. It also notes
// the process's peak RSS so far (VmHWM), so that the report shows which phase raised it.
func (p *Phases) Since(name string, start time.Time) time.Time {
	now := time.Now()
	p.Add(name, now.Sub(start), 0)
	if p != nil {
		peak := rss.Peak()
		p.mu.Lock()
		p.hwm[name] = peak
		p.mu.Unlock()
	}
	return now
}

// Phase is one line of the report.
type Phase struct {
	Name     string
	Duration time.Duration
	Count    int   // how many times it was added
	Bytes    int64 // bytes it moved (0: not counted)
	PeakRSS  int64 // the process's peak RSS when it last ended (0: not noted; phases timed by Since only)
}

// List returns the phases in the order they were first reported.
func (p *Phases) List() []Phase {
	if p == nil {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]Phase, 0, len(p.names))
	for _, n := range p.names {
		out = append(out, Phase{Name: n, Duration: p.d[n], Count: p.n[n], Bytes: p.bytes[n], PeakRSS: p.hwm[n]})
	}
	return out
}

// Write prints the report, one phase a line: seconds, the share of total (the wall clock of the whole run,
// which phases nested in others or overlapping them do not add up to), calls and bytes with their rate.
func (p *Phases) Write(w io.Writer, total time.Duration) error {
	for _, ph := range p.List() {
		line := fmt.Sprintf("  %-46s %8.3f s", ph.Name, ph.Duration.Seconds())
		if total > 0 {
			line += fmt.Sprintf(" %5.1f%%", 100*ph.Duration.Seconds()/total.Seconds())
		}
		if ph.Count > 1 {
			line += fmt.Sprintf("  %d×", ph.Count)
		}
		if ph.Bytes > 0 {
			line += fmt.Sprintf("  %.1f MB", float64(ph.Bytes)/1e6)
			if s := ph.Duration.Seconds(); s > 0 {
				line += fmt.Sprintf(" (%.2f GB/s)", float64(ph.Bytes)/1e9/s)
			}
		}
		if ph.PeakRSS > 0 {
			line += fmt.Sprintf("  [peak RSS %.2f GB]", float64(ph.PeakRSS)/1e9)
		}
		if _, err := fmt.Fprintln(w, line); err != nil {
			return err
		}
	}
	if total > 0 {
		_, err := fmt.Fprintf(w, "  %-46s %8.3f s\n", "total (wall clock)", total.Seconds())
		return err
	}
	return nil
}
