#!/usr/bin/env python3
"""Prints criterion's medians from target/criterion as Markdown tables, one per group, with
each entry's ratio to the group's governor entry (governor median / entry median: above 1 means
faster than governor). Usage: python3 benches/summarize.py [GROUP_PREFIX ...]; with
CARGO_TARGET_DIR set (a build with other RUSTFLAGS), reads $CARGO_TARGET_DIR/criterion."""
import json
import os
import pathlib
import sys

target = os.environ.get("CARGO_TARGET_DIR")
root = (
    pathlib.Path(target)
    if target
    else pathlib.Path(__file__).resolve().parent.parent / "target"
) / "criterion"
prefixes = sys.argv[1:]
groups = {}
for bench in sorted(root.glob("**/new/benchmark.json")):
    meta = json.loads(bench.read_text())
    est = json.loads((bench.parent / "estimates.json").read_text())
    group, func = meta["group_id"], meta["function_id"]
    if prefixes and not any(group.startswith(p) for p in prefixes):
        continue
    groups.setdefault(group, {})[func] = est["median"]["point_estimate"]

for group, funcs in groups.items():
    gov = next((v for k, v in funcs.items() if k.startswith("governor")), None)
    print(f"\n| `{group}` | median ns/check | vs governor |")
    print("|---|---:|---:|")
    for func, ns in funcs.items():
        ratio = "" if gov is None or func.startswith("governor") else f"{gov / ns:.2f}x"
        print(f"| {func} | {ns:.1f} | {ratio} |")
