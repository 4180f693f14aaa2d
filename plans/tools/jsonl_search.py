"""A custom retriever for a `retrieve` step with `tool:` — a stand-in for a vector database or
an HTTP search, which would be called the same way.

Usage: jsonl_search.py FILE FIELD QUERY LIMIT. Reads FILE (JSON Lines), scores each row by the
share of QUERY's words found in its values, and prints at most LIMIT rows as a JSON list, best
first: `{"content": row[FIELD], "source": "FILE:LINE", "score": share, "metadata": other fields}`.
"""

import json
import re
import sys


def words(text):
    return set(re.findall(r"\w+", str(text).lower()))


path, field, query, limit = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
wanted = words(query)
hits = []
with open(path, encoding="utf-8") as rows:
    for line, text in enumerate(rows, start=1):
        row = json.loads(text)
        found = set().union(*(words(value) for value in row.values()))
        share = len(wanted & found) / max(len(wanted), 1)
        if share > 0:
            metadata = {key: value for key, value in row.items() if key != field}
            hits.append({"content": row[field], "source": f"{path}:{line}", "score": round(share, 4), "metadata": metadata})
hits.sort(key=lambda hit: -hit["score"])
print(json.dumps(hits[:limit]))
