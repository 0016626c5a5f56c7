"""Builds a Python plugin into a component with componentize-py::

    python -m reconciler_sdk.build plugins/podset-py -o plugins/podset-py/podset-py.wasm

The directory holds the plugin's module (``app.py`` unless ``--module``
says otherwise), which binds ``Reconciler = plugin(...)``. The builder
imports it natively first, to learn which world to build:
``plugin-with-triggers``, or ``plugin-with-admission-and-triggers`` when the
plugin was given ``validate=`` or ``apply_defaults=``. It builds a short
entry module that also exports the plugin's triggers (and admission) as the
world's ``Triggers`` (and ``Admission``), so a plugin module never names
the exports itself.

componentize-py bundles the modules found on its ``-p`` paths: the plugin's
directory, this SDK's, and any ``-p`` given here (for other dependencies).
"""

from __future__ import annotations

import argparse
import importlib
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile

SDK_PARENT = pathlib.Path(__file__).resolve().parents[1]
ENTRY_MODULE = "reconciler_entry"


class BuildError(Exception):
    pass


def world_of(plugin_dir: pathlib.Path, module: str) -> str:
    """The WIT world the plugin's module asks for, by importing it."""
    if not (plugin_dir / f"{module}.py").is_file():
        raise BuildError(f"{plugin_dir} holds no {module}.py (the plugin's module; --module names another)")
    sys.path.insert(0, str(plugin_dir))
    try:
        loaded = importlib.import_module(module)
    except Exception as e:
        raise BuildError(f"importing {plugin_dir / (module + '.py')} failed: {type(e).__name__}: {e}") from None
    finally:
        sys.path.remove(str(plugin_dir))
    reconciler = getattr(loaded, "Reconciler", None)
    if reconciler is None or not hasattr(reconciler, "METADATA"):
        raise BuildError(
            f"{module}.py binds no Reconciler made by plugin(): end it with "
            "`Reconciler = plugin(METADATA, reconcile)`"
        )
    # Every build exports triggers (none declared: every change wakes).
    if getattr(reconciler, "ADMISSION", None) is None:
        return "plugin-with-triggers"
    return "plugin-with-admission-and-triggers"


def componentize_py() -> str:
    beside = pathlib.Path(sys.executable).parent / "componentize-py"
    if beside.is_file():
        return str(beside)
    found = shutil.which("componentize-py")
    if found is None:
        raise BuildError("componentize-py is not installed here: pip install componentize-py==0.25.1")
    return found


def build(plugin_dir: pathlib.Path, out: pathlib.Path, wit: pathlib.Path, module: str, paths: list[str]) -> str:
    """Builds the component to ``out`` (through a temporary file, so nothing
    loads half of it); returns the world built."""
    world = world_of(plugin_dir, module)
    with tempfile.TemporaryDirectory(prefix="reconciler-build-") as scratch:
        # componentize-py finds each export by its name in one module.
        entry = pathlib.Path(scratch) / f"{ENTRY_MODULE}.py"
        lines = [f"from {module} import Reconciler", "Triggers = Reconciler.Triggers"]
        if world == "plugin-with-admission-and-triggers":
            lines.append("Admission = Reconciler.Admission")
        entry.write_text("\n".join(lines) + "\n")
        app, extra = ENTRY_MODULE, ["-p", scratch]
        tmp = out.with_name(out.name + ".tmp")
        command = [componentize_py(), "-d", str(wit), "-w", world, "componentize", app, *extra,
                   "-p", str(plugin_dir), "-p", str(SDK_PARENT)]
        for path in paths:
            command += ["-p", path]
        command += ["-o", str(tmp)]
        if subprocess.run(command).returncode != 0:
            tmp.unlink(missing_ok=True)
            raise BuildError(f"componentize-py could not build {plugin_dir} (its output is above)")
        os.replace(tmp, out)
    return world


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m reconciler_sdk.build",
        description="Build a Python plugin into a WebAssembly component for reconciler-host.",
    )
    parser.add_argument("plugin_dir", type=pathlib.Path, help="the plugin's directory (holding app.py)")
    parser.add_argument("-o", "--out", type=pathlib.Path, required=True, help="the component to write (.wasm)")
    default_wit = SDK_PARENT.parent / "wit"
    parser.add_argument(
        "--wit", type=pathlib.Path, default=default_wit if default_wit.is_dir() else None,
        help="the contract's WIT directory (default: the wit/ beside this SDK's source tree)",
    )
    parser.add_argument("--module", default="app", help="the plugin's module in that directory (default: app)")
    parser.add_argument("-p", "--path", action="append", default=[], help="another directory of modules to bundle")
    args = parser.parse_args(argv)
    if args.wit is None:
        parser.error("no wit/ beside this SDK: give --wit path/to/reconciler-host/wit")
    try:
        world = build(args.plugin_dir.resolve(), args.out, args.wit, args.module, args.path)
    except BuildError as e:
        print(f"reconciler_sdk.build: {e}", file=sys.stderr)
        return 1
    print(f"built {args.out} ({args.out.stat().st_size / 1e6:.1f} MB, world {world}) from {args.plugin_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
