"""Human output at 80 columns (a narrow terminal, or piped): no cell is cut short with an ellipsis, wide tables
are split, event times read as ISO 8601 UTC (wall clock) or t+seconds (simulated)."""

from __future__ import annotations

import io

from rich.console import Console

from kai_stream.analytics.fit import fitted_tables
from kai_stream.analytics.render import QUEUE_COLUMNS, moment
from kai_stream.cli.explain import _print as print_story
from kai_stream.cli.simulate import _render
from kai_stream.explain import Story

LONG = "research-vision-foundation-models"


def _text(*renderables: object, width: int) -> str:
    out = io.StringIO()
    console = Console(file=out, width=width, force_terminal=False, color_system=None)
    for renderable in renderables:
        console.print(renderable)
    return out.getvalue()


def test_wide_queue_table_is_split_not_cut_at_80_columns() -> None:
    columns = [("queue", "left"), *((f"figure number {i}", "right") for i in range(11))]
    rows = [[LONG, *(f"{i * 1000.5:,.1f}" for i in range(11))], ["b", *("-" for _ in range(11))]]
    tables = fitted_tables("Queues", columns, rows, 80)  # type: ignore[arg-type]
    assert len(tables) > 1
    text = _text(*tables, width=80)
    assert "…" not in text
    assert text.count(LONG) == len(tables)
    assert all(len(line) <= 80 for line in text.splitlines())
    assert len(fitted_tables("Queues", columns, rows, 400)) == 1  # type: ignore[arg-type]


def test_simulate_tables_keep_names_at_80_columns() -> None:
    pod = f"{LONG}/trainer-worker-0000000042"
    result = {
        "pods": {pod: {"queue": LONG, "status": "Running", "node": "dgx-h100-rack07-node12", "gpu_indices": [0, 1]}},
        "queues": {
            LONG: {
                "fair_share": {"gpu": 8, "cpu": 64000, "memory": 512000},
                "allocated": {"gpu": 2, "cpu": 8000, "memory": 64000},
            }
        },
        "decisions": [{"type": "BindRequested"}],
    }
    out = io.StringIO()
    _render(result, Console(file=out, width=80, color_system=None))
    text = out.getvalue()
    assert "…" not in text
    assert "2 (0,1)" in text  # a count, then the device indices
    first_column = "".join(line.split("│")[1].strip() for line in text.splitlines() if line.startswith("│"))
    assert pod in first_column and LONG in first_column


def test_times_for_people() -> None:
    assert moment(1795633134.5) == "2026-11-25 18:58:54.5Z"
    assert moment(42.25) == "t+42.2s"


def test_split_table_titles_stay_on_one_line_at_80_columns() -> None:
    """analyze's queue table at 80 columns: its second part (queue, JCT avg, evicted, caused) is narrower than the
    title, which wrapped over two lines."""
    title = "Queues (GPUs are time-weighted averages)"
    cells = ["4", "1", "0.7", "2.0", "2.0", "17s", "17s", "17s", "19s", "0", "2"]
    rows = [["qa", *cells[: len(QUEUE_COLUMNS) - 1]], ["qb", *("-" for _ in QUEUE_COLUMNS[1:])]]
    tables = fitted_tables(title, QUEUE_COLUMNS, rows, 80)
    assert len(tables) == 2
    text = _text(*tables, width=80)
    for n in (1, 2):
        assert f"{title} ({n}/2)" in text, text


def test_explain_header_wraps_between_fields_at_80_columns() -> None:
    pod = f"{LONG}/trainer-worker-0000000042"
    uid = "0e4c7a52-1f0b-4f7e-9d4b-5a4f3c2b1a09"
    story = Story(pod=pod, uid=uid, pool="default", queue=LONG, gpu_milli=1500, steps=[])
    out = io.StringIO()
    print_story(Console(file=out, width=80, force_terminal=False, color_system=None), story)
    lines = out.getvalue().splitlines()
    assert all(len(line) <= 80 for line in lines), lines
    words = out.getvalue().split()
    assert pod in words and f"queue={LONG}" in words and f"uid={uid}" in words, lines
