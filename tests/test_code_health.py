"""Rules the test suite keeps about itself: no wall-clock assertion (speed lives in benchmarks/, measured as
medians; tests assert on what the request log records), and no test helper copied between test files."""

from __future__ import annotations

import re
from pathlib import Path

TESTS = Path(__file__).resolve().parent
CLOCKS = re.compile(
    r"\btime\.(monotonic|perf_counter|time|process_time)(_ns)?\(\)|\b(elapsed|duration|seconds_taken)\b"
)


def _test_sources() -> list[Path]:
    return sorted(p for p in TESTS.rglob("*.py") if p.name != Path(__file__).name)


def test_no_assertion_reads_a_clock() -> None:
    offenders = [
        f"{path.relative_to(TESTS)}:{number}: {line.strip()}"
        for path in _test_sources()
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if line.lstrip().startswith("assert") and CLOCKS.search(line)
    ]
    assert offenders == [], "wall-clock assertions (move the figure to benchmarks/):\n" + "\n".join(offenders)


def test_the_clock_pattern_catches_what_it_must() -> None:
    assert CLOCKS.search("assert time.monotonic() - started < 0.6")
    assert CLOCKS.search("assert elapsed < 15, elapsed")
    assert not CLOCKS.search("assert hub.log.count(contains='/resolve/') == 3")


def test_child_process_helpers_live_in_helpers_py() -> None:
    """The snippets every child process runs are defined once, in tests/helpers.py."""
    copies = {
        marker: [str(p.relative_to(TESTS)) for p in _test_sources() if marker in p.read_text()]
        for marker in ("class SiluAndMul(nn.Module)", "sys.addaudithook(", "def train_llama(", "class Child:")
    }
    assert all(found == ["helpers.py"] for found in copies.values()), copies
