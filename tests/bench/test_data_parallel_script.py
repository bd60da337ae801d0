"""bench/data_parallel.py runs end to end on a tiny model at 1 and 2 processes and prints its table."""

from __future__ import annotations

import pytest

from tests.bench.bench_scripts import SMOLLM2_TOKENIZER, load_bench_script


@pytest.fixture(scope="module")
def data_parallel():
    return load_bench_script("data_parallel.py", SMOLLM2_TOKENIZER)


def test_the_benchmark_prints_one_row_per_process_count(data_parallel, capsys, tmp_path):
    assert data_parallel.main(["--model", "tiny", "--steps", "2", "--prompts", "2", "--generations", "2",
                               "--completion", "8", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.startswith("| 1 |") or line.startswith("| 2 |")]
    assert len(rows) == 2 and rows[0].endswith("1.00x |")
    seconds = [float(row.split("|")[2]) for row in rows]
    assert all(s > 0 for s in seconds)
    assert (tmp_path / "p2" / "run" / "ranks" / "rank-1.json").is_file()  # it really ran 2 ranks


def test_prompts_must_split_evenly(data_parallel):
    with pytest.raises(SystemExit):
        data_parallel.main(["--model", "tiny", "--prompts", "3", "--processes", "1", "2"])
