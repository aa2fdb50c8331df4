package session

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"

	"bitalign/engine"
	"bitalign/session/view"
)

// RoutingReplay is `bitalign replay --routing-from`: the captured step replayed twice by the deterministic
// engine, once with the model's own routing and once with another capture's (R3, routing replay), each diffed
// with the capture. Both replays run the same canonical arithmetic, so what changes between the two verdicts is
// what the routing caused; what remains with the other side's routing is what numerics caused.
type RoutingReplay struct {
	From     string  // the capture whose layers.L.mlp.experts (and expert_weights, with Weights) were replayed
	Weights  bool    // the other capture's combine weights too (else the replay's own router probabilities)
	Own      *Report // the capture (A) vs its replay with the model's own routing (B)
	Routed   *Report // the capture (A) vs its replay with From's routing (B)
	Verdicts []string
}

// ReplayRouting replays the step at capPath as ReplayStep does, then again with the routing of the capture at
// o.RoutingFrom (engine.RoutingFromCapture), and words the two verdicts. With o.Save the own-routing replay is
// kept there and the other in o.Save + ".routed". The string is the backend it ran on.
func ReplayRouting(ctx context.Context, checkpoint, capPath string, o StepOptions) (*RoutingReplay, string, error) {
	if o.RoutingFrom == "" {
		return nil, "", fmt.Errorf("session: replay: no capture to take the routing from")
	}
	saveRouted := ""
	if o.Save != "" {
		saveRouted = o.Save + ".routed"
	}
	progress, backend, backendName, err := o.setup(o.Save, saveRouted)
	if err != nil {
		return nil, "", err
	}
	rc, err := openCapture(o.RoutingFrom) // the routing capture is an input too: checked before any work
	if err != nil {
		return nil, "", err
	}
	defer rc.Close()
	// every op, in full: the routing verdicts read the replay's routing
	plan, err := planReplay(capPath, nil, true)
	if err != nil {
		return nil, "", err
	}
	m, err := loadForReplay(checkpoint, capPath, o.Profile, progress, o.Timings)
	if err != nil {
		return nil, "", err
	}
	if m.Config.Experts == 0 {
		return nil, "", fmt.Errorf("session: replay --routing-from: checkpoint %s is a dense %s model: it has no routing to replay", checkpoint, m.Config.Architecture)
	}
	if err := checkCheckpoint(checkpoint, m, rc); err != nil {
		return nil, "", err
	}
	routing, err := engine.RoutingFromCapture(o.RoutingFrom, m.Config, o.RoutingWeights)
	if err != nil {
		return nil, "", err
	}
	progress(view.Progress{Stage: "replaying with its own routing on " + backendName})
	own, err := replayInto(ctx, m, capPath, o.Save, o, plan, backend, nil, progress)
	if err != nil {
		return nil, "", err
	}
	progress(view.Progress{Stage: "replaying with " + o.RoutingFrom + "'s routing on " + backendName})
	routed, err := replayInto(ctx, m, capPath, saveRouted, o, plan, backend, routing, progress)
	if err != nil {
		return nil, "", err
	}
	rr := &RoutingReplay{From: o.RoutingFrom, Weights: o.RoutingWeights, Own: own, Routed: routed}
	rr.Verdicts = rr.verdicts()
	return rr, backendName, nil
}

// logprobsDiffer is how many log-probabilities differ in r, and how many were compared.
func logprobsDiffer(r *Report) (mismatched, elements int64) {
	for _, s := range r.Ops {
		if s.Op == engine.OpLogprobs && s.Role == "out" {
			mismatched += s.Mismatched
			elements += s.Elements
		}
	}
	return mismatched, elements
}

// verdicts words the two replays: one line each, then what routing and what numerics caused.
func (rr *RoutingReplay) verdicts() []string {
	line := func(what string, r *Report) string {
		if r.Identical {
			return what + ": the capture reproduces bit for bit"
		}
		n, of := logprobsDiffer(r)
		first := "no op"
		if r.First != nil {
			first = r.First.Op
		}
		return fmt.Sprintf("%s: first divergence %s; %d of %d log-probabilities differ", what, first, n, of)
	}
	from := rr.From + "'s routing"
	if rr.Weights {
		from += " and weights"
	}
	v := []string{line("with its own routing", rr.Own), line("with "+from, rr.Routed)}
	own, _ := logprobsDiffer(rr.Own)
	routed, _ := logprobsDiffer(rr.Routed)
	switch {
	case rr.Own.Identical && rr.Routed.Identical:
		v = append(v, "the capture is the engine's arithmetic and "+from+" changes nothing it computes")
	case rr.Own.Identical:
		v = append(v, "the capture is the engine's arithmetic with its own routing; "+from+" alone moves it: that is what routing causes (the numerics are the same in both replays)")
	case rr.Routed.Identical:
		v = append(v, "with "+from+" the capture reproduces: routing caused every difference, numerics none")
	case routed < own:
		v = append(v, fmt.Sprintf("routing explains part: %d log-probabilities differ with the model's own routing, %d remain with %s (numerics)", own, routed, from))
	default:
		v = append(v, fmt.Sprintf("routing explains none of the log-probability differences (%d with the model's own routing, %d with %s): numerics", own, routed, from))
	}
	return v
}

// WriteRoutingReplay writes both verdicts and both reports: text and md one after the other, json as
// {"routing_from", "weights", "verdicts", "own_routing", "with_routing"} (each report as WriteJSON writes it).
// html is refused (one page holds one report).
func WriteRoutingReplay(w io.Writer, rr *RoutingReplay, format string) error {
	switch format {
	case "json":
		var own, routed bytes.Buffer
		if err := WriteJSON(&own, rr.Own); err != nil {
			return err
		}
		if err := WriteJSON(&routed, rr.Routed); err != nil {
			return err
		}
		b, err := json.MarshalIndent(struct {
			From     string          `json:"routing_from"`
			Weights  bool            `json:"weights"`
			Verdicts []string        `json:"verdicts"`
			Own      json.RawMessage `json:"own_routing"`
			Routed   json.RawMessage `json:"with_routing"`
		}{rr.From, rr.Weights, rr.Verdicts, own.Bytes(), routed.Bytes()}, "", "  ")
		if err != nil {
			return err
		}
		_, err = w.Write(append(b, '\n'))
		return err
	case "text", "md":
		head := func(s string) string {
			if format == "md" {
				return "## " + s + "\n\n"
			}
			return s + "\n\n"
		}
		var b bytes.Buffer
		b.WriteString(head("Routing replay: routing from " + rr.From))
		for _, v := range rr.Verdicts {
			if format == "md" {
				b.WriteString("- ")
			}
			b.WriteString(v + "\n")
		}
		b.WriteString("\n" + head("With its own routing"))
		if _, err := w.Write(b.Bytes()); err != nil {
			return err
		}
		if err := WriteReport(w, rr.Own, format); err != nil {
			return err
		}
		if _, err := io.WriteString(w, "\n"+head("With "+rr.From+"'s routing")); err != nil {
			return err
		}
		return WriteReport(w, rr.Routed, format)
	}
	return fmt.Errorf("session: a routing replay is written as text, md or json, not %q", format)
}
