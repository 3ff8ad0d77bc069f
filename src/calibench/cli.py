"""Command line: ``calibench make-minibench OUT`` (more commands arrive with the workflow)."""

from __future__ import annotations

import argparse
import sys
import time

from . import __version__


def _make_minibench(args: argparse.Namespace) -> int:
    from .minibench import MiniBenchSpec, build_minibench
    from .runtime import keep_freed_memory

    keep_freed_memory()
    spec = MiniBenchSpec(n_tss=args.n_tss, n_sss=args.n_sss, n_test=args.n_test, n_train=args.n_train, seed=args.seed)
    start = time.perf_counter()
    out = build_minibench(args.out, spec, progress=not args.quiet)
    print(f"mini benchmark (synthetic, NOT NATS-Bench results) written to {out} in {time.perf_counter() - start:.1f} s")
    return 0


def build_parser() -> argparse.ArgumentParser:
    from .minibench import MiniBenchSpec

    parser = argparse.ArgumentParser(prog="calibench", description="Calibration of NATS-Bench populations.")
    parser.add_argument("--version", action="version", version=f"calibench {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    mb = sub.add_parser("make-minibench", help="write the embedded mini benchmark (NATS formats, synthetic data)")
    mb.add_argument("out", help="output directory, e.g. resources/minibench")
    defaults = MiniBenchSpec()
    mb.add_argument("--n-tss", type=int, default=defaults.n_tss, help="TSS architectures")
    mb.add_argument("--n-sss", type=int, default=defaults.n_sss, help="SSS architectures")
    mb.add_argument("--n-test", type=int, default=defaults.n_test, help="test images per dataset")
    mb.add_argument("--n-train", type=int, default=defaults.n_train, help="training images for the heads")
    mb.add_argument("--seed", type=int, default=0)
    mb.add_argument("--quiet", action="store_true", help="no progress bar")
    mb.set_defaults(func=_make_minibench)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
