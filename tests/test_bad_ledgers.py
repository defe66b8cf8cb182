"""Malformed ledgers by class (wrong types, NaN/negative/inf counts, missing keys): one LedgerError,
and ``npukit report`` exits 2 with one line and writes nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from npukit.cli import main
from npukit.sim import Ledger, LedgerError

ROW = {"scope": "w/l", "component": "pe_array", "action": "mac", "bits": [8, 8, 32], "count": 10}
BAD = {
    "components-list": {"components": [1, 2]},
    "components-values": {"components": {"ifmap_sram": 5}},
    "meta-string": {"meta": "x"},
    "counts-object": {"counts": {"a": 1}},
    "count-nan": {"counts": [{**ROW, "count": float("nan")}]},
    "count-negative": {"counts": [{**ROW, "count": -1}]},
    "count-inf": {"counts": [{**ROW, "count": float("inf")}]},
    "count-string": {"counts": [{**ROW, "count": "10"}]},
    "cycles-nan": {"cycles": [{"scope": "w/l", "kind": "compute", "cycles": float("nan")}]},
    "row-missing-key": {"counts": [{"scope": "w/l", "count": 1}]},
}


def _ledger(**over) -> dict:
    return {"format": "npukit-ledger/1", "meta": {}, "components": {}, "counts": [ROW], "cycles": [], **over}


@pytest.mark.parametrize("case", list(BAD))
def test_malformed_ledger_is_one_typed_error(case: str) -> None:
    with pytest.raises(LedgerError, match="malformed ledger") as exc:
        Ledger.from_dict(_ledger(**BAD[case]), "bad.json")
    assert "\n" not in str(exc.value)


def test_good_ledger_still_loads() -> None:
    assert Ledger.from_dict(_ledger()).counts[("w/l", "pe_array", "mac", (8, 8, 32))] == 10


@pytest.mark.parametrize("case", ["components-list", "count-nan"])
def test_report_exits_2_and_writes_nothing(tmp_path: Path, capsys, case: str) -> None:
    p = tmp_path / "bad.ledger.json"
    p.write_text(json.dumps(_ledger(**BAD[case])))  # json writes NaN as the bare token NaN
    out = tmp_path / "rep"
    with pytest.raises(SystemExit) as exc:
        raise SystemExit(main(["report", str(p), "--out", str(out)]))
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "malformed ledger" in err
    assert not out.exists()
