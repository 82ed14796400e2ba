"""`python -m oomwatch.lab.vm`: run the cgroup v2 guest suite in the lab VM, one session per
kernel, and print what each brought back; exit 0 only when every kernel passed.

    python -m oomwatch.lab.vm                       # GUEST_SUITE (the v2 cases) on 6.1 and 6.12
    python -m oomwatch.lab.vm --kernel 6.12 -- tests/kernel/test_kills.py -k group -x
    python -m oomwatch.lab.vm --fixtures-to tests/data/kernel-v2   # keep the real reports
    python -m oomwatch.lab.vm --fetch-only          # download and build the images only
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from oomwatch.lab.vm import (
    GUEST_SUITE,
    KERNELS,
    boot_images,
    copy_fixtures,
    run_pytest_in_vm,
    vm_unavailable_reason,
)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m oomwatch.lab.vm",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--kernel",
        action="append",
        choices=sorted(KERNELS),
        help="kernel series to boot (repeatable; default: all)",
    )
    parser.add_argument("--timeout-s", type=float, default=900.0, help="per VM session")
    parser.add_argument(
        "--fixtures-to",
        type=Path,
        default=None,
        help="copy the recorded reports and counter files to DIR/<release>/",
    )
    parser.add_argument("--fetch-only", action="store_true", help="only fetch and build images")
    parser.add_argument("--quiet", action="store_true", help="do not echo the guest console")
    parser.add_argument("pytest_args", nargs="*", help=f"after --; default {' '.join(GUEST_SUITE)}")
    args = parser.parse_args(argv)
    reason = vm_unavailable_reason()
    if reason is not None:
        print(f"oomwatch-vm: cannot run the lab VM here: {reason}", file=sys.stderr)
        return 2
    failed = 0
    for series in args.kernel or list(KERNELS):
        if args.fetch_only:
            print(boot_images(series))
            continue
        started = time.monotonic()
        run = run_pytest_in_vm(
            series,
            args.pytest_args or GUEST_SUITE,
            timeout_s=args.timeout_s,
            echo=None if args.quiet else sys.stderr,
        )
        print(run.summary())
        print(f"  {time.monotonic() - started:.0f} s with image checks; share {run.vm.share}")
        if args.fixtures_to is not None:
            print(f"  fixtures -> {copy_fixtures(run, args.fixtures_to)}")
        failed += not run.passed
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
