"""The report path against a plain scan (issue 16): `oomwatch report --json FILE` and the text
report, each a whole process, beside a naive per-line regex scan for kill lines over the same
64 MiB kernel log (`bench/decode.py`'s generator), measured in one run, alternated, best of N.

    .venv/bin/python bench/report_path.py [--mib 64] [--repeat 5] [--profile] \
        [--chatter-per-line 1000|60]

The package's bytecode is compiled first, as `pip install` does.  Prints each best time, the
report's speed as a fraction of the scan's (goal >= 0.8), and checks
that the report found every kill the scan found.  `--profile` prints where the JSON report
spends its time (cProfile, in-process) instead.
"""

from __future__ import annotations

import argparse
import compileall
import cProfile
import io
import json
import pstats
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from decode import build_dmesg_log  # bench/decode.py, beside this script

# The naive scan: what a person would write to count kills in a log, as a whole process.
NAIVE_SCAN = r"""
import re, sys
kill = re.compile(r"Killed process (\d+) \((.*?)\)")
found = set()
with open(sys.argv[1], encoding="utf-8", errors="replace") as log:
    for line in log:
        m = kill.search(line)
        if m:
            found.add(int(m.group(1)))
print(" ".join(map(str, sorted(found))))
"""

WITHOUT_HYPERSCAN = """
import sys
sys.modules["hyperscan"] = None  # import hyperscan now raises ImportError
from oomwatch.cli import main
sys.exit(main(["report", "--json", sys.argv[1]]))
"""


def _run(argv: list[str]) -> tuple[float, bytes]:
    started = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, check=True)
    return time.perf_counter() - started, done.stdout


def measure(path: Path, repeat: int) -> None:
    # As installed: pip compiles the package's bytecode at install time; a checkout run with
    # PYTHONDONTWRITEBYTECODE (this sandbox sets it) would compile every module each start.
    compileall.compile_dir(str(Path(__file__).resolve().parents[1] / "oomwatch"), quiet=1)
    commands = {
        "naive scan": [sys.executable, "-c", NAIVE_SCAN, str(path)],
        "report --json": [sys.executable, "-m", "oomwatch.cli", "report", "--json", str(path)],
        "report (text)": [sys.executable, "-m", "oomwatch.cli", "report", str(path)],
        # the same without the optional accelerator (`pip install oomwatch` without [fast])
        "--json, no hyperscan": [sys.executable, "-c", WITHOUT_HYPERSCAN, str(path)],
    }
    best = dict.fromkeys(commands, float("inf"))
    outputs: dict[str, bytes] = {}
    for _ in range(repeat):  # alternated, so a busy moment hits all three alike
        for name, argv in commands.items():
            seconds, outputs[name] = _run(argv)
            best[name] = min(best[name], seconds)
    scanned = {int(pid) for pid in outputs["naive scan"].split()}
    reported = json.loads(outputs["report --json"])
    victims = {v["pid"] for i in reported["incidents"] for v in i["victims"]}
    scan_s = best["naive scan"]
    for name, seconds in best.items():
        print(
            f"{name:20s} best of {repeat}: {seconds:.3f} s  speed vs the scan: "
            f"{scan_s / seconds:.2f}x"
        )
    print(
        f"kills: the scan found {len(scanned)} killed pids; report --json "
        f"{len(reported['incidents'])} incidents naming {len(victims)}"
    )
    if missed := scanned - victims:
        raise SystemExit(f"the report missed kills the scan found: pids {sorted(missed)}")


def profile(path: Path, sort: str = "cumulative") -> None:
    from oomwatch.cli import main as cli_main

    out = io.StringIO()
    profiler = cProfile.Profile()
    real_stdout, sys.stdout = sys.stdout, io.StringIO()
    try:
        profiler.runcall(cli_main, ["report", "--json", str(path)])
    finally:
        sys.stdout = real_stdout
    pstats.Stats(profiler, stream=out).sort_stats(sort).print_stats(25)
    print(out.getvalue())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument(
        "--chatter-per-line",
        type=int,
        default=1000,
        help="lines of chatter per OOM line (1000: 10 reports in 64 MiB; 60: 484, dense with OOMs)",
    )
    args = parser.parse_args()
    text, _, reports = build_dmesg_log(args.mib << 20, chatter_per_line=args.chatter_per_line)
    with tempfile.NamedTemporaryFile("w", suffix=".log", encoding="utf-8") as log:
        log.write(text)
        log.flush()
        print(f"log: {len(text) / 1e6:.1f} MB, {reports} reports")
        del text
        if args.profile:
            profile(Path(log.name))
        else:
            measure(Path(log.name), args.repeat)


if __name__ == "__main__":
    main()
