"""Writes the plans of the orchestration-overhead benchmark into a directory.

    python3 benches/gen_plans.py OUT_DIR

linear-N.yaml: N template steps in a chain (each renders its predecessor's output plus one char).
fanout-W.yaml: one root, W independent template steps that need it, and one join that needs them all.
"""
import sys
from pathlib import Path


def linear(n: int) -> str:
    lines = ["version: 1", f"name: linear-{n}", "steps:"]
    lines.append('  - { name: s0, type: template, template: "x" }')
    for i in range(1, n):
        lines.append(f'  - {{ name: s{i}, type: template, template: "{{{{ input }}}}" }}')
    return "\n".join(lines) + "\n"


def fanout(width: int) -> str:
    lines = ["version: 1", f"name: fanout-{width}", "steps:"]
    lines.append('  - { name: root, type: template, template: "x" }')
    for i in range(width):
        lines.append(f'  - {{ name: b{i}, type: template, needs: [root], template: "{{{{ input }}}}{i}" }}')
    needs = ", ".join(f"b{i}" for i in range(width))
    lines.append(f'  - {{ name: join, type: template, needs: [{needs}], template: "{{{{ input | length }}}}" }}')
    return "\n".join(lines) + "\n"


def main() -> None:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    for n in (10, 100, 300, 1000):
        (out / f"linear-{n}.yaml").write_text(linear(n))
    for width in (50, 200):
        (out / f"fanout-{width}.yaml").write_text(fanout(width))


if __name__ == "__main__":
    main()
