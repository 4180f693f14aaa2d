"""A custom retriever for tests/plans/custom-retriever.yaml: a stand-in for a vector database.

Usage: search.py QUERY LIMIT. Prints, as a JSON list best first, at most LIMIT notes sharing a
word with QUERY: `{content, source, score, metadata}`, the score being the share of the query's
words the note holds. One note is stored twice (a mirror), as real indexes often do.
"""

import json
import re
import sys

NOTES = [
    ("ci.md", "Run pagantic validate in CI: every problem at once, each with its file, line and column."),
    ("mirror/ci.md", "Run pagantic validate in CI: every problem at once, each with its file, line and column."),
    ("policy.md", "A policy file given with --policy holds every plan in CI to the same rules."),
    ("graph.md", "pagantic graph prints the step graph as Graphviz DOT or a Mermaid flowchart."),
    ("batch.md", "run --batch runs a plan once per row of a JSON Lines or CSV file."),
]


def words(text):
    return set(re.findall(r"\w+", text.lower()))


query, limit = sys.argv[1], int(sys.argv[2])
wanted = words(query)
hits = []
for rank, (source, content) in enumerate(NOTES):
    share = len(wanted & words(content)) / max(len(wanted), 1)
    if share > 0:
        hits.append({"content": content, "source": source, "score": round(share, 4), "metadata": {"rank": rank}})
hits.sort(key=lambda hit: -hit["score"])
print(json.dumps(hits[:limit]))
