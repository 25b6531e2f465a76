"""How often a failure report names the right bug class: the shipped-bug runs (``run.py --out``) read back.

Each caught buggy check's diagnosis (and, for a probe's report, the probe it names) is mapped to the bug classes
its words claim (``CLAIMS``: phrase -> classes; the first phrase found decides), then compared with the
catalogue's class of the entry:

- *right*: the claimed classes include the entry's class;
- *wrong*: a class is claimed and it is not the entry's;
- *none*: no class is claimed ("no simple pattern", "gradient wrong at the probe X only" for a probe that
  names no class, or no diagnosis), or the diagnosis only describes where or how much the gradient is wrong
  without a cause (the error confined to a range of input values; analytic = k x numeric for a k other than 2).

The phrases are symgrad's own report wording, matched here once and kept fixed; a cause the catalogue has no
class for ("the wrong array returned") counts as wrong::

    python benchmarks/shipped_bugs/diagnoses.py RUN.jsonl[.gz]
"""

from __future__ import annotations

import argparse
import gzip
import json
from collections import Counter, defaultdict

#: (phrase in the diagnosis or the error's first line, the bug classes it claims); first match wins
CLAIMS = [
    ("non-finite gradient", {"nan_at_special_point"}),
    (" nan", {"nan_at_special_point"}),
    ("(repeated indices)", {"repeated_indices"}),
    ("selects more than once", {"repeated_indices"}),
    ("the forward ignores", {"padding_or_ignore_index"}),
    ("ignore_index / padding value", {"padding_or_ignore_index"}),
    ("padding / ignored index", {"padding_or_ignore_index"}),
    ("the same values fed to both", {"aliasing_same_input"}),
    ("fed to two inputs", {"aliasing_same_input"}),
    ("moving the elements it set together", {"ties"}),
    ("ties", {"ties"}),
    ("sign flipped", {"sign"}),
    ("swapped", {"swapped_arguments"}),
    ("ignores the head gradient", {"missing_factor"}),
    ("accumulated over", {"grad_req_or_accumulation", "missing_factor"}),
    ("req='add'", {"grad_req_or_accumulation"}),
    ("stale buffer", {"grad_req_or_accumulation"}),
    ("evaluated at the output", {"evaluated_at_output"}),
    ("f'(y)", {"evaluated_at_output"}),
    ("returns the wrong array", {"wrong_array"}),
    ("stride", {"stride_dilation"}),
    ("normaliz", {"normalization"}),
]


def claimed(diagnosis, error) -> set:
    text = f"{diagnosis or ''} || {error or ''}".lower()
    for phrase, classes in CLAIMS:
        if phrase.lower() in text:
            return classes
    return set()


def tally(rows):
    """``{checker: Counter(right/wrong/none)}`` and the wrong cases ``[(id, class, claimed, diagnosis)]``."""
    counts, wrong = defaultdict(Counter), []
    for r in rows:
        if r["variant"] != "buggy" or not r["caught"]:
            continue
        got = claimed(r.get("diagnosis"), r.get("error"))
        verdict = "none" if not got else "right" if r["bug_class"] in got else "wrong"
        counts[r["checker"]][verdict] += 1
        counts["all"][verdict] += 1
        if verdict == "wrong":
            wrong.append((r["id"], r["bug_class"], tuple(sorted(got)), (r.get("diagnosis") or "")[:90]))
    return counts, wrong


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run")
    args = ap.parse_args(argv)
    opener = gzip.open if args.run.endswith(".gz") else open
    with opener(args.run, "rt") as f:
        rows = [json.loads(line) for line in f]
    counts, wrong = tally(rows)
    print("checker                 reports  right   wrong   none")
    for checker, c in counts.items():
        n = sum(c.values())
        print(
            f"{checker:22s} {n:8d}  {100 * c['right'] / n:5.1f}%  {100 * c['wrong'] / n:5.1f}%  "
            f"{100 * c['none'] / n:5.1f}%"
        )
    print("\nwrong classes (entry, class, claimed, diagnosis), by count:")
    for (e, cls, got, d), n in Counter(wrong).most_common():
        print(f"  {n:4d}  {e} [{cls}] claims {got}: {d}")


if __name__ == "__main__":
    main()
