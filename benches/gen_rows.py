#!/usr/bin/env python3
"""Writes the review rows the batch and cache benchmarks run over: DIR/rows-N.jsonl for each N,
one {"id", "text"} object per line, the same six reviews repeated with the row's number.

Usage: python3 benches/gen_rows.py DIR N [N ...]
"""

import json
import sys

REVIEWS = ["Light, fast, battery lasts all day.", "Fans get loud under load.",
           "Arrived broken; support never answered.", "Does the job.", "Great screen, pricey.",
           "Would not buy again."]

directory, counts = sys.argv[1], [int(n) for n in sys.argv[2:]]
for n in counts:
    with open(f"{directory}/rows-{n}.jsonl", "w") as f:
        for i in range(n):
            f.write(json.dumps({"id": f"r{i}", "text": f"{REVIEWS[i % len(REVIEWS)]} (#{i})"}) + "\n")
