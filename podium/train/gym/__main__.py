"""The gym's command line.

    python -m podium.train.gym pool [--seed N] [--mode M] [--specialists a,b]   # a pool file
    python -m podium.train.gym pool --priced [--seed N]                       # the priced gym's
    python -m podium.train.gym questions [--families a,b] [--n 3]             # held-out questions
"""

from __future__ import annotations

import argparse
import sys

from podium.train.gym import (
    FAMILIES,
    MODES,
    SPECIALISTS,
    GymTask,
    pool_toml,
    priced_pool_toml,
)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m podium.train.gym")
    sub = parser.add_subparsers(dest="command", required=True)
    pool = sub.add_parser("pool", help="print a gym pool file (TOML)")
    pool.add_argument("--seed", type=int, default=None, help="shuffle the id assignment")
    pool.add_argument("--mode", choices=MODES, default="question")
    pool.add_argument("--specialists", default=",".join(SPECIALISTS),
                      help="comma-separated specialists to list (default: all five)")
    pool.add_argument("--priced", action="store_true",
                      help="the priced gym's four workers (podium.train.gym.priced)")
    questions = sub.add_parser("questions", help="print held-out questions, one per line")
    questions.add_argument("--families", default=",".join(FAMILIES))
    questions.add_argument("--n", type=int, default=3)
    args = parser.parse_args()
    if args.command == "questions":
        families = tuple(f.strip() for f in args.families.split(",") if f.strip())
        task = GymTask(families=families)
        for item in task.items("test")[:args.n]:
            sys.stdout.write(item.question + "\n")
        return
    if args.priced:
        if args.mode != "question":
            parser.error("the priced gym's workers read the question: leave out --mode")
        sys.stdout.write(priced_pool_toml(args.seed))
        return
    names = tuple(n.strip() for n in args.specialists.split(",") if n.strip())
    unknown = sorted(set(names) - set(SPECIALISTS))
    if unknown or not names:
        parser.error(f"unknown specialists {unknown}; choose from {', '.join(SPECIALISTS)}")
    sys.stdout.write(pool_toml(args.seed, args.mode, names))


if __name__ == "__main__":
    main()
