"""The KIFL §7 benchmark driver at reduced size (``python -m bench.kifl --quick``): structure and invariants."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner


def test_quick_bench_runs_all_studies(tmp_path: Path):
    import torch

    from bench.kifl import APPROACHES, LAMBDAS, command

    out = tmp_path / "kifl.json"
    threads = torch.get_num_threads()
    try:
        res = CliRunner().invoke(command, ["--datasets", "digits", "--seeds", "1", "--quick", "--out", str(out)])
    finally:
        torch.set_num_threads(threads)      # the command sets one thread for the whole process
    assert res.exit_code == 0, res.output
    data = json.loads(out.read_text())["results"]["digits"]
    sm = data["summary"]
    for variant in ("rules", "rules+ft", "paper+ft"):
        for a in APPROACHES:
            assert {"c0", "c4", "mean"} <= set(sm[f"{a}|{variant}"])
        for a in ("MLwKM", "FLwKM"):        # knowledge-injected models never violate their R-KM
            assert sm[f"{a}|{variant}"]["mean"]["POV"]["mean"] == 0.0
    assert sm["P-KM|paper+ft"]["mean"]["POV"]["mean"] == 0.0   # the paper's R-KM contains the P-KM label
    assert [k for k in sm if k.startswith("lambda|")] == [f"lambda|{v}" for v in LAMBDAS]
    assert len([k for k in sm if k.startswith("data|")]) == 4
    assert data["reference"][0]["max_abs_TA_diff"] == 0.0   # the engine-free Alg. 1 loop agrees exactly
    from bench.kifl import merge_results

    whole = json.loads(out.read_text())
    merged = merge_results([whole, whole])["results"]["digits"]      # per-process seeds → mean ± std
    assert merged["seeds"] == [0, 0]
    fl = merged["summary"]["FLwKM|rules"]["mean"]["TA"]
    assert fl["n"] == 2 and fl["std"] == 0.0 and fl["mean"] == sm["FLwKM|rules"]["mean"]["TA"]["mean"]
    md = out.with_suffix(".md").read_text()
    assert "| c0 |" in md and "[87 / 2]" in md and "Fig. 4" in md
