"""What the project's law costs a project: its evidence once, its pooled fit, a cached rerun.

    python benchmarks/bench_project_law_cost.py [--quick] [--siblings 10] [--rows 50000]

``--siblings`` finished runs of ``--rows`` logged steps each (synthetic, one law, three lr
schedule shapes; ``--quick``: 4 runs of 20,000 rows), then CPU seconds in this process of:

- the floor, measured in the same run: one running run of ``--rows`` rows forecast alone
  (``run_analysis``), what annotating it costs without siblings;
- each finished run's evidence (its history binned, and its own early log backtested at
  10, 25 and 50%): paid once, when the run finishes, then kept in its ``loss_eta`` tag;
- the pooled fit of the project (``ProjectBook.law``: both laws and shifts chosen leave one
  sibling out, the siblings narrowed), once per configuration per pass (target: <= 2 s for
  10 siblings of 50,000 rows);
- the cached rerun: the book made again from the evidence the runs store (decoded, no
  history read) and its digest, which is what a nightly pass with no new finished run
  spends before it finds every run unchanged; and the stored form's size.
"""

from __future__ import annotations

import json
import time

from harness import Figure, cpu_of, parser, print_figures

from tracker_plugin.core.analysis import AnalysisConfig, run_analysis
from tracker_plugin.frame.history import build_history
from tracker_plugin.jobs.project_book import ProjectBook, decode_evidence, encode_evidence, take_evidence
from tracker_plugin.plan.schedule import LrSchedule
from tracker_plugin.testing import synthetic_run

SHAPES = ("cosine:warmup=500,total={t},final=0.1", "constant:warmup=500", "wsd:warmup=500,total={t},decay={d},final=0")


def histories(count: int, rows: int) -> list:
    """``count`` finished runs of ``rows`` steps on lr schedules of three shapes, one law."""
    out = []
    for i in range(count):
        spec = SHAPES[i % 3].format(t=rows, d=rows // 5)
        frame = synthetic_run(rows, batch=262_144.0, lr_schedule=spec, anneal_gain=0.1, seed=i, noise=0.02)
        out.append((build_history(frame, run=f"sibling-{i}"), LrSchedule.parse_spec(spec.format(t=rows))))
    return out


def main() -> None:
    options = parser(__doc__, quick="4 siblings of 20,000 rows")
    options.add_argument("--siblings", type=int, default=None)
    options.add_argument("--rows", type=int, default=None)
    args = options.parse_args()
    count = args.siblings or (4 if args.quick else 10)
    rows = args.rows or (20_000 if args.quick else 50_000)
    runs = histories(count, rows)
    running = build_history(
        synthetic_run(rows, batch=262_144.0, lr_schedule=f"cosine:warmup=500,total={2 * rows},final=0.1", seed=99),
        run="running")
    running_config = AnalysisConfig(targets=(3.0,), ema_token_window=2e7,
                                    lr_schedule=LrSchedule.parse_spec(f"cosine:warmup=500,total={2 * rows},final=0.1"))

    floor = cpu_of(lambda: run_analysis(running, running_config))
    start = time.process_time()
    evidences = [take_evidence(history, AnalysisConfig(targets=(1.0,), ema_token_window=2e7, lr_schedule=p))
                 for history, p in runs]
    per_run = (time.process_time() - start) / count
    book = ProjectBook(tuple(evidences), "the bench's project")
    start = time.process_time()
    law = book.law(running, running_config)
    pooled = time.process_time() - start
    stored = [encode_evidence(e, "fingerprint") for e in evidences]
    rerun = cpu_of(lambda: ProjectBook(tuple(decode_evidence(s, "fingerprint") for s in stored), "again").digest, repeat=3)
    size = max(len(json.dumps(s)) for s in stored)
    print(f"{count} siblings of {rows:,} rows; {law.describe()[:160]}")
    print_figures([
        Figure("floor: one running run forecast alone (CPU s)", f"{floor:.2f}", target="(the floor)"),
        Figure("evidence of one finished run, once (CPU s)", f"{per_run:.2f}", f"{floor:.2f}", f"x{per_run / floor:.1f}"),
        Figure(f"pooled fit of the project, {count} siblings (CPU s)", f"{pooled:.2f}", f"{floor:.2f}",
               f"x{pooled / floor:.1f}", "<= 2 s" if count >= 10 and rows >= 50_000 else "(quick: not judged)",
               pooled <= 2.0 if count >= 10 and rows >= 50_000 else None),
        Figure("cached rerun: the book from stored evidence (CPU s)", f"{rerun:.3f}", f"{floor:.2f}",
               f"x{rerun / floor:.3f}", "0 histories read", True),
        Figure("stored evidence, largest (characters)", f"{size:,}", target="<= 8,000 (an MLflow tag)", met=size <= 8000),
    ])


if __name__ == "__main__":
    main()
