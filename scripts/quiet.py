#!/usr/bin/python3
"""scripts/quiet.py: whether a benchmark can be believed. A ratio against a
peer measured in the same run means something only if nothing else ran
beside the two (a busy machine slows PyTorch's spinning thread pools far
more than apf: issue 36 found ratios of 7.67x that were 2.99x on a quiet
machine) and if the rounds of each side agree with one another.

    scripts/quiet.py NAME -- CMD [ARG...]
    scripts/quiet.py rounds NAME CASE/SIDE=X,Y,... [CASE/SIDE=...]

runs CMD (its output passed through) and prints, as `RESULT NAME ...` lines:

  foreign_cpu_share   CPU time the rest of the machine used while CMD ran,
                      over the cores' time (the busy time /proc/stat counts,
                      less CMD's and its descendants' own): 0 when nothing
                      else ran, 0.5 when another process kept one of two
                      cores busy throughout
  steal_share         time the hypervisor gave to other guests, over the
                      cores' time
  loadavg_before, loadavg_after    the one-minute load average

The machine was quiet when foreign_cpu_share and steal_share are both at
most their limits (APF_BENCH_MAX_FOREIGN, APF_BENCH_MAX_STEAL; 0.05 each).
Exit status: CMD's when it failed; else 75 when the machine was not quiet
(a line `bench NAME: NOT QUIET: ...` on stderr says why), unless
APF_BENCH_KEEP_GOING=1 asks to keep the figures anyway (the line still
says so); else 0. A run shorter than a second is too short for /proc/stat's
ticks to judge, and is said to be so, not judged.

The benches that compare with a peer in rounds judge the rounds with
spread() and steady() below (imported from this file, or `quiet.py rounds`
from a shell bench, given each side's figure per round): each side's spread
is the width of the 95% confidence interval of its rounds' median, over
that median (median_interval(): for up to 8 rounds the interval is all of
them, so the spread is (max - min) / median; from 9 rounds on it leaves
out the extremes that cannot move the median, one on each side for 9 to
11 rounds), printed as `RESULT NAME <case>_<side>_spread`, and over
APF_BENCH_MAX_SPREAD (0.10) the figure is not steady: a `NOT STEADY` line on stderr, and exit 75 unless
APF_BENCH_KEEP_GOING=1. A ratio between two sides measured in alternation
is judged by its pairs instead (pairs() below): round i of one side over
round i of the other, whose spread is `<case>_ratio_spread`; a side whose
own rounds spread past the limit then only WANDERS (a line on stderr, the
figure kept), since a VM's speed moving between rounds moves both sides
of a pair alike and leaves the ratio as it was, which the pairs' spread
checks.
"""
import math
import os
import resource
import statistics
import subprocess
import sys
import time

NOT_QUIET = 75  # EX_TEMPFAIL: try again on a quiet machine


def limit(name, default):
    v = os.environ.get(name)
    if v is None:
        return default
    try:
        x = float(v)
    except ValueError:
        sys.exit(f"apf: bench: {name}={v!r}: not a number")
    if not 0 <= x <= 1:
        sys.exit(f"apf: bench: {name}={v!r}: not between 0 and 1")
    return x


def keep_going():
    return os.environ.get("APF_BENCH_KEEP_GOING", "") not in ("", "0")


def cpu_ticks(stat="/proc/stat"):
    """(busy, steal) ticks of all cores from /proc/stat's first line: busy
    is user + nice + system + irq + softirq (guest time is inside user),
    steal the hypervisor's."""
    with open(stat) as f:
        fields = f.readline().split()
    if not fields or fields[0] != "cpu" or len(fields) < 9:
        raise ValueError(f"{stat}: no aggregate cpu line")
    user, nice, system, _idle, _iowait, irq, softirq, steal = map(int, fields[1:9])
    return user + nice + system + irq + softirq, steal


def own_cpu_s():
    """CPU seconds of this process's waited-for descendants."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def loadavg():
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


def judge(wall_s, cores, busy_s, steal_s, own_s, max_foreign, max_steal):
    """The verdict on one run from its measurements: (foreign share, steal
    share, a reason it was not quiet or None, judged). Pure, for tests."""
    span = wall_s * cores
    if span <= 0:
        return 0.0, 0.0, None, False
    foreign = max(0.0, busy_s - own_s) / span
    steal = max(0.0, steal_s) / span
    if wall_s < 1.0:
        return foreign, steal, None, False
    why = []
    if foreign > max_foreign:
        why.append(f"other work took {foreign:.0%} of the {cores} cores' time "
                   f"(limit {max_foreign:.0%})")
    if steal > max_steal:
        why.append(f"the hypervisor took {steal:.0%} of it for other guests "
                   f"(limit {max_steal:.0%})")
    return foreign, steal, "; ".join(why) or None, True


def interval_rank(n, level=0.95):
    """k such that the k-th smallest and the k-th largest of n rounds hold
    their distribution's median with probability at least `level`, whatever
    the distribution (each round falls below the median with probability
    1/2, so the count that does is Binomial(n, 1/2)): the largest k with
    P(count < k) <= (1 - level) / 2, and 1 (the whole range) where even k
    = 1 cannot reach the level (fewer than 6 rounds at 95%)."""
    k, below = 0, 0.0
    while k < n // 2:
        below += math.comb(n, k) / 2 ** n  # P(count <= k)
        if below > (1 - level) / 2:
            break
        k += 1
    return max(k, 1)


def median_interval(xs, level=0.95):
    """(lo, hi): the distribution-free `level` confidence interval of the
    median of xs (interval_rank())."""
    ys = sorted(xs)
    k = interval_rank(len(ys), level)
    return ys[k - 1], ys[len(ys) - k]


def spread(xs):
    """The width of the 95% interval of a side's rounds' median, over the
    median: (max - min) / median for up to 8 rounds; 0 for fewer than
    two. A round that stalls (a VM's neighbour, a page-cache flush) moves
    max - min as far as it likes but the median not at all; from 9 rounds
    on it is left out, as the median leaves it out."""
    xs = list(xs)
    if len(xs) < 2:
        return 0.0
    m = statistics.median(xs)
    lo, hi = median_interval(xs)
    return (hi - lo) / m if m else float("inf")


def spread_words(rounds):
    """What a spread over that many rounds left out, for a NOT STEADY
    line: nothing below 9 rounds."""
    k = interval_rank(rounds) - 1
    if not k:
        return ""
    if k == 1:
        return " (the median's 95% interval: all but the highest and the lowest)"
    return f" (the median's 95% interval: all but the {k} highest and the {k} lowest)"


def unsteady(bench, case, side, s, rounds):
    """The line saying a side's spread s over its rounds is past
    APF_BENCH_MAX_SPREAD, else None."""
    most = limit("APF_BENCH_MAX_SPREAD", 0.10)
    if s <= most:
        return None
    return (f"bench {bench}: {case}: NOT STEADY: {side}'s {rounds} rounds "
            f"spread {s:.0%} of their median{spread_words(rounds)} "
            f"(limit {most:.0%})")


def steady(bench, case, sides):
    """Prints each side's spread as `RESULT bench <case>_<side>_spread` and
    returns the lines saying which sides are not steady (sides: {side:
    [figure per round]}); empty when all are within APF_BENCH_MAX_SPREAD."""
    bad = []
    for side, xs in sides.items():
        s = spread(xs)
        print(f"RESULT {bench} {case}_{side}_spread {s:.3f}")
        line = unsteady(bench, case, side, s, len(xs))
        if line:
            bad.append(line)
    return bad


def pairs(bench, case, sides, name="ratio"):
    """Judges the ratio of two sides measured in alternation by its pairs:
    sides is {mine: [figure per round], peer: [figure per round]}, round i
    of one measured right beside round i of the other. A VM whose speed
    wanders from one round to the next (issue 36: an idle one's rounds
    spread 12% to 85%) moves both sides of a pair alike, so a ratio can
    hold while its sides wander; the pairs' spread says whether it did.
    Prints each side's spread and the pairs' (`RESULT bench
    <case>_<name>_spread`). Returns (the median of the pairs' ratios, the
    lines saying that spread is past APF_BENCH_MAX_SPREAD, the lines
    saying a side's own rounds are: its figure is the machine's of the
    moment, not to be compared across runs, but the ratio stands or falls
    by its pairs)."""
    (mine, xs), (peer, ys) = sides.items()
    ratios = paired(xs, ys, f"{case}: {mine} against {peer}")
    wander = wanders(bench, case, sides, name)
    bad = judged(bench, case, name, ratios, "pairs")
    return statistics.median(ratios), bad, wander


def paired(xs, ys, what):
    """Round i of xs over round i of ys, for every round."""
    if len(xs) != len(ys) or not xs:
        raise ValueError(f"{what}: {len(xs)} rounds against {len(ys)}")
    return [x / y if y else float("inf") for x, y in zip(xs, ys)]


def wanders(bench, case, sides, name="ratio"):
    """Prints each side's spread over its rounds (`RESULT bench
    <case>_<side>_spread`) and returns the lines saying which are past
    APF_BENCH_MAX_SPREAD, for a bench that judges its ratios by their pairs
    (the name of what it judges so: name)."""
    return [line.replace("NOT STEADY", "WANDERS", 1) +
            f": its figure is the machine's of the moment; the {name} is judged "
            "by its pairs" for line in steady(bench, case, sides)]


def judged(bench, case, name, xs, what="rounds"):
    """Prints `RESULT bench <case>_<name>_spread` of a figure taken once
    per round (or pair) and returns the lines saying it is past
    APF_BENCH_MAX_SPREAD."""
    s = spread(xs)
    print(f"RESULT {bench} {case}_{name}_spread {s:.3f}")
    line = unsteady(bench, case, name, s, len(xs))
    return [line.replace(" rounds ", f" {what} ", 1)] if line else []


def finish(bench, unsteady, wandering=()):
    """Ends a bench that judged its rounds: the WANDERS lines (figures
    kept) and the NOT STEADY lines on stderr, then exit 75 unless
    APF_BENCH_KEEP_GOING=1."""
    for line in wandering:
        print(line, file=sys.stderr)
    for line in unsteady:
        print(line + (" (kept: APF_BENCH_KEEP_GOING)" if keep_going() else ""),
              file=sys.stderr)
    if unsteady and not keep_going():
        sys.exit(NOT_QUIET)


def rounds(argv):
    """quiet.py rounds NAME CASE/SIDE=X,Y,... ..."""
    if len(argv) < 4:
        print("apf: bench: usage: scripts/quiet.py rounds NAME CASE/SIDE=X,Y,... ...",
              file=sys.stderr)
        return 2
    name, bad = argv[2], []
    for arg in argv[3:]:
        key, _, values = arg.partition("=")
        case, _, side = key.partition("/")
        try:
            xs = [float(x) for x in values.split(",")]
        except ValueError:
            xs = []
        if not case or not side or not xs:
            print(f"apf: bench: {arg}: not CASE/SIDE=X,Y,...", file=sys.stderr)
            return 2
        bad += steady(name, case, {side: xs})
    sys.stdout.flush()
    finish(name, bad)
    return 0


def main(argv):
    if len(argv) > 1 and argv[1] == "rounds":
        return rounds(argv)
    if len(argv) < 4 or argv[2] != "--" or not argv[1]:
        print("apf: bench: usage: scripts/quiet.py NAME -- CMD [ARG...]", file=sys.stderr)
        return 2
    name, cmd = argv[1], argv[3:]
    max_foreign = limit("APF_BENCH_MAX_FOREIGN", 0.05)
    max_steal = limit("APF_BENCH_MAX_STEAL", 0.05)
    hz = os.sysconf("SC_CLK_TCK")
    cores = os.cpu_count() or 1
    load0 = loadavg()
    busy0, steal0 = cpu_ticks()
    own0 = own_cpu_s()
    t0 = time.monotonic()
    try:
        rc = subprocess.call(cmd)
    except OSError as e:
        print(f"apf: bench: {cmd[0]}: {e.strerror}", file=sys.stderr)
        return 127
    wall = time.monotonic() - t0
    busy1, steal1 = cpu_ticks()
    own = own_cpu_s() - own0
    load1 = loadavg()
    foreign, steal, why, judged = judge(wall, cores, (busy1 - busy0) / hz,
                                        (steal1 - steal0) / hz, own,
                                        max_foreign, max_steal)
    print(f"bench {name}: {wall:.1f} s; other work {foreign:.1%} of the cores' "
          f"time, steal {steal:.1%}; load average {load0:.2f} before, {load1:.2f} after"
          + ("" if judged else " (too short to judge)"))
    print(f"RESULT {name} foreign_cpu_share {foreign:.4f}")
    print(f"RESULT {name} steal_share {steal:.4f}")
    print(f"RESULT {name} loadavg_before {load0:.2f}")
    print(f"RESULT {name} loadavg_after {load1:.2f}")
    sys.stdout.flush()
    if rc < 0:
        rc = 128 - rc
    if why:
        print(f"bench {name}: NOT QUIET: {why}"
              + (" (kept: APF_BENCH_KEEP_GOING)" if keep_going() else ""),
              file=sys.stderr)
    if rc:
        return rc
    return NOT_QUIET if why and not keep_going() else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
