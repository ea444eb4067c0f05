"""`ailab` on the command line: doctor, labs build/check/grade/reset, bench, serve.

Each benchmark suite is a module `ailab.suites.<name>` with
`run(quick: bool = False, argv: list[str] | None = None) -> dict`;
`ailab bench <name> --json` prints that dict as one JSON object.
"""

from __future__ import annotations

import argparse
import importlib
import json
import pkgutil
import sys


def _suites() -> list[str]:
    """The suites by the names `ailab bench` takes: module ailab.suites.generation_serve is generation-serve."""
    import ailab.suites

    return sorted(
        m.name.replace("_", "-") for m in pkgutil.iter_modules(ailab.suites.__path__) if not m.name.startswith("_")
    )


def _module(suite: str):
    return importlib.import_module(f"ailab.suites.{suite.replace('-', '_')}")


def cmd_doctor(args) -> int:
    from ailab.doctor import run_doctor

    report = run_doctor()
    print(json.dumps(report, indent=2) if args.json else report["text"])
    return 0 if report["ok"] else 1


def cmd_labs(args) -> int:
    from ailab.labs.build import LabFormatError, build_all

    if args.action == "build":
        try:
            stale = build_all(args.solutions, args.labs, check_only=args.check)
        except LabFormatError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        if args.check:
            for path in stale:
                print(f"out of date: {path} (run `ailab labs build`)")
            return 1 if stale else 0
        print(f"wrote {len(stale)} lab notebook(s)" + "".join(f"\n  {p}" for p in stale))
        return 0
    if args.action in ("grade", "reset"):
        from ailab.labs import grade

        try:
            if args.action == "reset":
                backup, source = grade.reset(args.path, args.labs, args.solutions)
                print(f"restored {args.path} from {source}; your version is kept as {backup}")
                return 0
            results = grade.grade(
                args.dir,
                args.labs,
                jobs=args.jobs,
                limit_s=args.timeout,
                csv_path=args.csv,
                progress=grade.print_progress,
            )
        except (FileNotFoundError, ValueError) as e:  # LabFormatError is a ValueError
            print(f"error: {e}", file=sys.stderr)
            return 2
        print(grade.summary_table(results) if results else f"no notebooks under {args.dir}")
        if args.csv:
            print(f"wrote {sum(len(g.rows()) for g in results)} row(s) to {args.csv}")
        return 0
    from ailab.labs.runner import run_lab

    try:
        report = run_lab(args.path)
    except (FileNotFoundError, ValueError) as e:  # LabFormatError is a ValueError
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(report.summary())
    return 0 if report.ok else 1


def _bench_help(suite: str | None) -> int:
    """`ailab bench --help` lists the suites; `ailab bench SUITE --help` shows that suite's own options."""
    if suite is None:
        print("usage: ailab bench SUITE [--json] [--quick] [SUITE OPTIONS]\n\nsuites:")
        for name in _suites():
            doc = (_module(name).__doc__ or "").strip().splitlines()
            print(f"  {name:<16} {doc[0] if doc else ''}")
        print("\n`ailab bench SUITE --help` shows a suite's own options.")
        return 0
    module = _module(suite)
    print(f"usage: ailab bench {suite} [--json] [--quick] [OPTIONS]\n\n{(module.__doc__ or '').strip()}\n")
    import inspect

    if "argparse" not in inspect.getsource(module):
        print("(this suite has no options of its own)")
        return 0
    try:
        module.run(argv=["--help"])  # a suite with options prints them (argparse) and exits 0
    except SystemExit as e:
        return 0 if e.code in (0, None) else int(e.code) if isinstance(e.code, int) else 2
    return 0


def cmd_bench(args) -> int:
    suites = _suites()
    if args.suite is not None:
        args.suite = args.suite.replace("_", "-")  # request_time and request-time name one suite
    if args.help or "-h" in args.rest or "--help" in args.rest:
        if args.suite is not None and args.suite not in suites:
            print(f"error: unknown benchmark suite {args.suite!r}; available: {', '.join(suites)}", file=sys.stderr)
            return 2
        return _bench_help(args.suite)
    if args.suite is None:
        print(f"error: name a benchmark suite: {', '.join(suites)} (`ailab bench --help`)", file=sys.stderr)
        return 2
    if args.suite not in suites:
        print(f"error: unknown benchmark suite {args.suite!r}; available: {', '.join(suites)}", file=sys.stderr)
        return 2
    module = _module(args.suite)
    result = module.run(quick=args.quick, argv=args.rest or None)
    if args.json:
        print(json.dumps(result, default=float))
    else:
        for key, value in result.items():
            print(f"{key:>36}: {value}")
    return 0


def cmd_serve(args) -> int:
    from ailab.server import serve_main

    return serve_main(args.rest)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="ailab", description="The ailab course toolkit.")
    sub = p.add_subparsers(dest="command", required=True)

    d = sub.add_parser("doctor", help="check versions, device and the offline models and data")
    d.add_argument("--json", action="store_true")
    d.set_defaults(func=cmd_doctor)

    labs = sub.add_parser("labs", help="build labs/ from solutions/, or check a learner's lab")
    lsub = labs.add_subparsers(dest="action", required=True)
    b = lsub.add_parser("build", help="write labs/ from solutions/")
    b.add_argument("--solutions", default="solutions")
    b.add_argument("--labs", default="labs")
    b.add_argument("--check", action="store_true", help="write nothing; exit 1 if labs/ is out of date")
    c = lsub.add_parser("check", help="run a lab notebook and report which checks pass")
    c.add_argument("path")
    g = lsub.add_parser("grade", help="run every submitted lab under DIR; one CSV row per learner, lab and check")
    g.add_argument("dir", help="submissions: one learner per file or per folder directly under it")
    g.add_argument("--jobs", type=int, default=2, help="notebooks run at once (default 2)")
    g.add_argument("--timeout", type=float, default=300, help="seconds each notebook may run (default 300)")
    g.add_argument("--csv", help="write the per-check results to this CSV file")
    g.add_argument("--labs", default="labs", help="the generated labs to compare check cells with")
    r = lsub.add_parser("reset", help="replace a lab notebook with a fresh copy, keeping yours as a .bak-*.ipynb")
    r.add_argument("path")
    r.add_argument("--labs", default="labs")
    r.add_argument("--solutions", default="solutions")
    labs.set_defaults(func=cmd_labs)

    be = sub.add_parser("bench", help="run a benchmark suite: " + ", ".join(_suites()), add_help=False)
    be.add_argument("suite", nargs="?")
    be.add_argument("-h", "--help", action="store_true", help="the suites, or one suite's own options")
    be.add_argument("--json", action="store_true", help="print one JSON object")
    be.add_argument("--quick", action="store_true", help="a shorter run (for tests)")
    be.set_defaults(func=cmd_bench)

    s = sub.add_parser("serve", help="start the inference server (ailab serve --help for its options)", add_help=False)
    s.set_defaults(func=cmd_serve)
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    # bench and serve pass the arguments they do not know on to the suite or the server.
    args, rest = parser.parse_known_args(argv)
    if rest and args.command not in ("bench", "serve"):
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    args.rest = rest
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
