"""`ailab bench http URL ...`: drive any HTTP endpoint (not only ailab's) with ailab.bench.

    ailab bench http http://127.0.0.1:8000/predict --clients 16 --duration 20 --body '{"text": "fine"}'
    ailab bench http http://127.0.0.1:8000/predict --rate 200 --duration 20 --body '{"text": "fine"}' --json
    ailab bench http http://127.0.0.1:8000/health --clients 4 --csv out.csv

Without --rate it is a closed loop of --clients; with --rate, an open loop with Poisson arrivals.
Without --body it sends GET. --body may be one JSON value, or a JSON list with --body-list (one body
per request, used in turn). Load tests in this course target 127.0.0.1 only.
"""

from __future__ import annotations

import argparse
import json

from ailab import bench


def parse_args(argv: list[str] | None):
    p = argparse.ArgumentParser(prog="ailab bench http", description="Load-test an HTTP endpoint.")
    p.add_argument("url", help="e.g. http://127.0.0.1:8000/predict")
    p.add_argument("--clients", type=int, default=8, help="closed loop: concurrent clients (default 8)")
    p.add_argument("--rate", type=float, default=None, help="open loop: Poisson arrivals per second")
    p.add_argument("--duration", type=float, default=10.0, help="measured seconds (default 10)")
    p.add_argument("--warmup", type=float, default=2.0, help="seconds sent but not counted (default 2)")
    p.add_argument("--body", default=None, help="JSON request body; POST when given, GET otherwise")
    p.add_argument("--body-list", action="store_true", help="--body is a JSON list of bodies, used in turn")
    p.add_argument("--timeout", type=float, default=10.0, help="per-request timeout in seconds")
    p.add_argument("--seed", type=int, default=0, help="open loop: arrival-time seed")
    p.add_argument("--csv", default=None, help="write one row per request to this file")
    p.add_argument("--out", default=None, help="write the JSON summary (with windows) to this file")
    p.add_argument("--json", action="store_true", help="accepted here too; `ailab bench --json http` prints JSON")
    args = p.parse_args(argv)
    if args.body is None:
        payloads = None
    else:
        try:
            body = json.loads(args.body)
        except json.JSONDecodeError as e:
            p.error(f'--body is not valid JSON ({e}); quote it, e.g. --body \'{{"text": "hello"}}\'')
        if args.body_list and not (isinstance(body, list) and body):
            p.error("--body-list needs --body to be a non-empty JSON list")
        payloads = body if args.body_list else [body]
    return args, payloads


def run(quick: bool = False, argv: list[str] | None = None) -> dict:
    if not argv:
        raise SystemExit(
            "usage: ailab bench http URL [--clients N | --rate R] [--duration S] [--body JSON] "
            "(see `ailab bench http --help`)"
        )
    args, payloads = parse_args(argv)
    duration, warmup = (min(args.duration, 3.0), min(args.warmup, 0.5)) if quick else (args.duration, args.warmup)
    try:
        if args.rate is not None:
            result = bench.open_loop(
                args.url, payloads, args.rate, duration, warmup, seed=args.seed, timeout_s=args.timeout
            )
        else:
            result = bench.closed_loop(args.url, payloads, args.clients, duration, warmup, timeout_s=args.timeout)
    except bench.BenchTargetError as e:
        raise SystemExit(f"error: {e}") from None
    except (ValueError, TypeError) as e:
        raise SystemExit(f"error: {e}") from None
    if args.csv:
        result.to_csv(args.csv)
    if args.out:
        result.to_json(args.out)
    from ailab.device import describe_hardware

    return {**result.summary(), "device": describe_hardware().one_line()}
