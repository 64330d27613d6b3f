"""`python -m podium.train.gym pool [--seed N] [--mode M] [--specialists a,b]`: a gym pool."""

from __future__ import annotations

import argparse
import sys

from podium.train.gym import MODES, SPECIALISTS, pool_toml


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m podium.train.gym")
    sub = parser.add_subparsers(dest="command", required=True)
    pool = sub.add_parser("pool", help="print a gym pool file (TOML)")
    pool.add_argument("--seed", type=int, default=None, help="shuffle the id assignment")
    pool.add_argument("--mode", choices=MODES, default="question")
    pool.add_argument("--specialists", default=",".join(SPECIALISTS),
                      help="comma-separated specialists to list (default: all five)")
    args = parser.parse_args()
    names = tuple(n.strip() for n in args.specialists.split(",") if n.strip())
    unknown = sorted(set(names) - set(SPECIALISTS))
    if unknown or not names:
        parser.error(f"unknown specialists {unknown}; choose from {', '.join(SPECIALISTS)}")
    sys.stdout.write(pool_toml(args.seed, args.mode, names))


if __name__ == "__main__":
    main()
