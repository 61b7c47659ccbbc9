"""infra/bytecode.py: the installed modules the demo imports, compiled when the environment is made."""

import importlib.util
import subprocess
import sys
import sysconfig
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_demos_modules_are_installed_and_compiled_to_the_bytecode_an_import_reads():
    listed = (ROOT / "infra" / "demo-imports.txt").read_text().split()
    site = Path(sysconfig.get_paths()["purelib"])
    installed = [p for p in listed if (site / p).is_file()]
    # a list gone stale (packages moved on) saves little: remake it with `python infra/bytecode.py record -- …`
    assert len(installed) >= 0.9 * len(listed)
    done = subprocess.run(
        [sys.executable, str(ROOT / "infra" / "bytecode.py"), "compile"], capture_output=True, text=True, check=True
    )
    assert f"{len(installed)} of the demo's {len(installed)} installed modules compiled" in done.stdout
    assert all(Path(importlib.util.cache_from_source(str(site / p))).is_file() for p in installed)
