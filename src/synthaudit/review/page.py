"""``results/verdict.html``: the page a person reads first, standalone (no report chrome), at full
width: the gate's decision, then per synthetic set the verdict, the most likely copies beside their
training scans, where copied regions are, fidelity, membership inference, and the provenance.

Why a page of its own: the Snakemake report shows the verdict as a caption in a narrow column with
thumbnail figures (issue 46); the figures themselves are clear. The page links them at full size and
reads every number from the run's files (synthaudit.review.verdict, .gate); nothing is recomputed.
"""

from __future__ import annotations

import html
import json
from collections.abc import Sequence
from pathlib import Path

from . import gate
from .verdict import dataset_verdict, verdict_lines

STYLE = """
body { font-family: system-ui, sans-serif; margin: 0 auto; max-width: 1400px; padding: 1em 2em; line-height: 1.4; }
h1 { margin-bottom: 0.2em; }
.decision { font-size: 1.4em; padding: 0.6em 1em; border-radius: 6px; margin: 0.6em 0; }
.pass { background: #d9f2d9; } .fail { background: #f8d7d7; } .inconclusive { background: #fdf0c8; }
table { border-collapse: collapse; width: 100%; margin: 0.5em 0 1em; }
th, td { border-bottom: 1px solid #ddd; padding: 0.3em 0.6em; text-align: left; vertical-align: top; }
th { cursor: pointer; background: #f4f4f4; user-select: none; }
td.fail { color: #a00; font-weight: bold; } td.inconclusive { color: #8a6d00; font-weight: bold; }
img.full { width: 100%; height: auto; border: 1px solid #ddd; }
ul.verdict li { margin: 0.15em 0; }
.meta { color: #555; font-size: 0.9em; }
"""

SORT = """
document.querySelectorAll("table.sortable th").forEach(function (th, col) {
  th.addEventListener("click", function () {
    var body = th.closest("table").tBodies[0], rows = Array.from(body.rows), asc = th.dataset.asc !== "1";
    rows.sort(function (a, b) {
      var x = a.cells[col].dataset.v || a.cells[col].textContent, y = b.cells[col].dataset.v || b.cells[col].textContent;
      var nx = parseFloat(x), ny = parseFloat(y);
      var c = (!isNaN(nx) && !isNaN(ny)) ? nx - ny : x.localeCompare(y);
      return asc ? c : -c;
    });
    rows.forEach(function (r) { body.appendChild(r); });
    th.parentNode.querySelectorAll("th").forEach(function (h) { h.dataset.asc = ""; });
    th.dataset.asc = asc ? "1" : "0";
  });
});
"""


def _e(x) -> str:
    return html.escape(str(x))


def _gate_section(checks: list[gate.Check], result: str) -> list[str]:
    out = [f'<div class="decision {result}" id="gate">Release gate (shipped policy): <b>{result.upper()}</b> '
           f'&mdash; <code>synthaudit gate</code> exits {gate.EXIT[result]}</div>']
    if not checks:
        return out + ["<p>No dataset with calibrated calls to judge.</p>"]
    out.append('<table class="sortable"><thead><tr><th>dataset</th><th>rule</th><th>verdict</th><th>value</th>'
               "<th>95 % interval</th><th>limit</th><th>what</th></tr></thead><tbody>")
    for c in checks:
        v = "" if c.value is None else f"{c.value:.4g}"
        ci = f"[{c.ci[0]:.4g}, {c.ci[1]:.4g}]" if c.ci else ""
        cls = c.verdict.replace(" ", "-")
        out.append(f"<tr><td>{_e(c.dataset)}</td><td>{_e(c.rule)}</td><td class=\"{cls}\">{_e(c.verdict)}</td>"
                   f"<td data-v=\"{'' if c.value is None else c.value}\">{v}</td><td>{ci}</td><td>{_e(c.limit)}</td>"
                   f"<td>{_e(c.why)}</td></tr>")
    return out + ["</tbody></table>"]


def _list(lines: Sequence[str]) -> list[str]:
    """verdict_lines' indentation (2 spaces: an item, 4: a sub-item) as nested lists."""
    out, nested = ['<ul class="verdict">'], False
    for line in lines:
        sub = line.startswith("    ")
        if sub and not nested:
            out.append("<ul>")
        if not sub and nested:
            out.append("</ul>")
        out.append(f"<li>{_e(line.strip())}</li>")
        nested = sub
    return out + (["</ul>"] if nested else []) + ["</ul>"]


def _figure(root: Path, rel: str, alt: str) -> list[str]:
    """A figure of the run at full width, linked to itself (opens full size); nothing where absent."""
    if not (root / "results" / rel).is_file():
        return []
    return [f'<p><a href="{_e(rel)}"><img class="full" src="{_e(rel)}" alt="{_e(alt)}"></a></p>']


def render(root: str | Path, datasets: Sequence[str], measures: Sequence[str], aligned: Sequence[str]) -> str:
    """The page's HTML for the audit in ``root`` (links relative to ``root/results``)."""
    root = Path(root)
    checks = gate.evaluate(root, gate.load_policy())
    result = gate.overall(checks)
    prov_path = root / "results" / "provenance.json"
    prov = json.loads(prov_path.read_text()) if prov_path.is_file() else {}
    body = ["<h1>synthaudit verdict</h1>",
            f'<p class="meta">synthaudit {_e(prov.get("version", "?"))}; parameters SHA-256 '
            f'<code>{_e(str(prov.get("params_sha256", "?"))[:16])}</code>; {_e(prov.get("numerics", "?"))} numerics on '
            f'{_e(prov.get("device", "?"))} (<a href="provenance.json">provenance.json</a>). The full report: '
            '<a href="report.html">report.html</a>; the policy and the exit codes: docs/gate.md.</p>']
    body += _gate_section(checks, result)
    for d in datasets:
        v = dataset_verdict(root, d, measures, aligned=d in aligned)
        if not v:
            continue
        lines = verdict_lines(v)
        body.append(f'<h2 id="{_e(d)}">{_e(lines[0])}</h2>')
        body += _list(lines[1:])
        body += _figure(root, f"figures/{d}/verdict.png", f"{d}: the most likely copies beside their training scans")
        body += _figure(root, f"figures/{d}/local_copies.png", f"{d}: where the copied regions are")
        body += _figure(root, f"figures/{d}/fidelity.png", f"{d}: samples and real scans in the embedding")
        body += _figure(root, f"figures/{d}/membership_roc.png", f"{d}: membership attacks, ROC on the patients")
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            f"<title>synthaudit verdict: {result}</title><style>{STYLE}</style></head><body>\n"
            + "\n".join(body) + f"\n<script>{SORT}</script>\n</body></html>\n")
