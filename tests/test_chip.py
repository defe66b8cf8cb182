"""``load_chip``: every form an ``--arch`` value takes, read into one array or a multi-core chip, and the energy table
that prices it (the experiments' NPU costs and ``npukit sim`` read their ``--arch`` through it)."""

from __future__ import annotations

from pathlib import Path

import pytest

from npukit.sim import Arch, ConfigError, MultiCoreArch, chip_table, is_multicore_spec, load_chip

STREAM = Path(__file__).parent / "data" / "stream_hw"


@pytest.mark.parametrize(("spec", "kind", "cores"), [
    ("npu128", Arch, 1), ("npu32", Arch, 1), ("quad128", MultiCoreArch, 4), ("tpu_v4", MultiCoreArch, 8),
    (f"stream:{STREAM / 'tpu_like_quad_core.yaml'}", MultiCoreArch, 4),
])
def test_each_form_gives_its_chip(spec: str, kind: type, cores: int) -> None:
    chip = load_chip(spec, warnings=[])
    assert isinstance(chip, kind) and is_multicore_spec(spec) is (kind is MultiCoreArch)
    assert (len(chip.mac_cores) if isinstance(chip, MultiCoreArch) else 1) == cores


def test_a_multicore_toml_file_is_a_chip(tmp_path: Path) -> None:
    f = tmp_path / "two.toml"
    f.write_text('name = "two"\n[[core]]\narch = "npu32"\ncount = 2\n')
    chip = load_chip(str(f))
    assert isinstance(chip, MultiCoreArch) and len(chip.mac_cores) == 2 and chip.name == "two"


def test_the_table_is_a_stream_chips_own_or_the_named_one() -> None:
    warnings: list[str] = []
    stream = load_chip(f"stream:{STREAM / 'simba.yaml'}", warnings=warnings)
    assert chip_table(stream) is stream.table and warnings  # its notes go to the list, not stderr
    assert chip_table(load_chip("quad128")).name == chip_table(load_chip("npu128")).name == "horowitz45"


@pytest.mark.parametrize(("spec", "words"), [
    ("nosuch", "'nosuch' is neither a built-in (npu128, npu32, quad128, hetero4, tpu_v4)"),
    ("zigzag:hw.yaml", "only `npukit sim` runs"),
    ("stream:nosuch.yaml", "nosuch.yaml"),
    ("", "an arch must be a name or a file"),
    ("a" * 5000, "is not a usable name or path"),  # the file system's name limit: an OSError before
])
def test_bad_specs_are_one_config_error(spec: str, words: str) -> None:
    with pytest.raises(ConfigError, match=None) as exc:
        load_chip(spec)
    assert words in str(exc.value) and "\n" not in str(exc.value)
    assert "zigzag:HW.yaml" not in str(exc.value)  # the forms it names are the ones load_chip reads
