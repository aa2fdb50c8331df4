"""Summary of a py-spy raw profile of record_bench.py --loop (`py-spy record -f raw --threads`): where the recorded
forwards' time goes beside the plain ones'.

    python3 capture/python/tests/spy_summary.py PROFILE.raw [--top 30]

A raw profile is one line per distinct stack, "frame;frame;... count", outermost first (with --threads the first
frame names the thread). Samples under plain_loop are the plain forwards', under recorded_loop (and the recorder's
writer thread's, but where it waits for work) the recorded ones'. Prints the samples of each, the top frames by own samples of each, the
recorder's functions by inclusive samples, and the writer thread's share: a sampled profile's answer to what
record_bench's ablations can only bound.
"""

import argparse
import collections
import sys


def summarize(lines, top=30):
    """The summary text of the raw profile's lines."""
    own = {k: collections.Counter() for k in ("plain", "recorded")}
    incl = collections.Counter()
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
    out = [f"samples: plain {total['plain']}, recorded {total['recorded']} (the writer thread {writer}); "
           f"recorded / plain {total['recorded'] / max(total['plain'], 1):.3f}"]
    for kind in ("plain", "recorded"):
        out.append(f"-- {kind}: top frames by own samples")
        out += [f"{c:8d} {f}" for f, c in own[kind].most_common(top)]
    out.append("-- recorded: bitalign_capture functions by inclusive samples")
    out += [f"{c:8d} {f}" for f, c in incl.most_common(top)]
    return "\n".join(out) + "\n"


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
