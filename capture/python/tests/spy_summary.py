"""Summary of a py-spy raw profile of record_bench.py --loop (`py-spy record -f raw --threads`): where the recorded
forwards' time goes beside the plain ones'.

    python3 capture/python/tests/spy_summary.py PROFILE.raw [--top 30]

A raw profile is one line per distinct stack, "frame;frame;... count", outermost first (with --threads the first
frame names the thread). Samples under plain_loop are the plain forwards', under recorded_loop (and the recorder's
writer thread's, but where it waits for work) the recorded ones'. Prints the samples of each, the top frames by own samples of each, the
recorder's functions by inclusive samples, the recorder's own samples (by the innermost recorder frame: its
code and what it calls, not the modules it watches) and the writer thread's share: a sampled profile's answer to
what record_bench's ablations can only bound.
"""

import argparse
import collections
import sys


def summarize(lines, top=30):
    """The summary text of the raw profile's lines."""
    own = {k: collections.Counter() for k in ("plain", "recorded")}
    incl = collections.Counter()
    mine, mine_fn = collections.Counter(), collections.Counter()  # the recorder's own samples
    total = collections.Counter()
    writer = 0
    for line in lines:
        line = line.rstrip("\n")
        if not line:
            continue
        stack, _, n = line.rpartition(" ")
        try:
            n = int(n)
        except ValueError:
            raise ValueError(f"not a py-spy raw line (want 'frames count'): {line[:80]!r}") from None
        frames = stack.split(";")
        if any("plain_loop" in f for f in frames):
            kind = "plain"
        elif any("recorded_loop" in f for f in frames):
            kind = "recorded"
        elif "bitalign_capture writer" in frames[0]:
            if frames[-1].startswith(("Condition.wait", "wait (threading")):
                continue  # the writer thread idle, waiting for work
            kind, writer = "recorded", writer + n
        else:
            continue  # the model's build, imports, warm-up outside the loops
        total[kind] += n
        own[kind][frames[-1]] += n
        if kind == "recorded":
            for f in set(frames[1:]):
                if "bitalign_capture" in f:
                    incl[f] += n
            at = _own_frame(frames)
            if at is not None:
                mine[at] += n
                mine_fn[at.split(" (")[0]] += n
    out = [f"samples: plain {total['plain']}, recorded {total['recorded']} (the writer thread {writer}); "
           f"recorded / plain {total['recorded'] / max(total['plain'], 1):.3f}"]
    for kind in ("plain", "recorded"):
        out.append(f"-- {kind}: top frames by own samples")
        out += [f"{c:8d} {f}" for f, c in own[kind].most_common(top)]
    out.append("-- recorded: bitalign_capture functions by inclusive samples")
    out += [f"{c:8d} {f}" for f, c in incl.most_common(top)]
    n = sum(mine.values())
    out.append(f"-- the recorder's own samples: {n} of the recorded {total['recorded']} "
               f"({n / max(total['recorded'], 1) * 100:.1f} %; the innermost recorder frame, a watched module's own "
               "call not counted), by function")
    out += [f"{c:8d} {f}" for f, c in mine_fn.most_common(top)]
    out.append("-- the recorder's own samples by line")
    out += [f"{c:8d} {f}" for f, c in mine.most_common(top)]
    return "\n".join(out) + "\n"


def _own_frame(frames):
    """The innermost bitalign_capture frame of a recorded sample's stack when the sample is the recorder's own
    time (its code, or what it calls outside the package: torch, numpy, pyarrow), else None: no recorder frame,
    or the innermost one is the watching wrapper running its module (a frame below it is the module's)."""
    at = [i for i, f in enumerate(frames) if "bitalign_capture" in f]
    if not at:
        return None
    i = at[-1]
    if frames[i].split(" (")[0].endswith("_Observer.__init__.<locals>.call") and i < len(frames) - 1:
        return None
    return frames[i]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("profile")
    ap.add_argument("--top", type=int, default=30)
    a = ap.parse_args(argv)
    try:
        with open(a.profile) as f:
            sys.stdout.write(summarize(f, a.top))
    except (OSError, ValueError) as e:
        print(f"spy_summary: {a.profile}: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
