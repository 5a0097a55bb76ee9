"""Build (once) and load the C++ CPU kernels of the quantized linear (kernels/csrc/), with the machine's compiler
through torch.utils.cpp_extension and ninja, cached in a folder the caller passes in (kernels/ knows no config).

The build targets this CPU (-march=native: AVX-512 VNNI, AVX2 or plain scalar code, whichever it has); the
module's name carries a digest of the sources and the CPU's model and flags, so a cache folder shared between
machines never hands one CPU another's build. Where no compiler (or ninja) exists the loader returns None with
the reason, and the callers fall back to the torch path.
"""
from __future__ import annotations

import functools
import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

CSRC = Path(__file__).resolve().parent / "csrc"
SOURCES = ("quant_linear.cpp", "decode_ops.cpp", "decode_attention.cpp", "decode_stack.cpp")
CFLAGS = ("-O3", "-fopenmp", "-fno-math-errno")  # with -march=<arch>; no -ffast-math: the sums keep their order
HEADERS = ("decode_ops.h", "quant_simd.h", "quant_blocks.h", "quant_kquants_avx512.h", "quant_tiles_avx512.h",
           "quant_ktiles_avx512.h")


@dataclass(slots=True)
class CpuKernels:
    """The loaded extension (None when it could not be built) and one line saying which it is or why not."""

    module: ModuleType | None
    note: str


def _cpu_identity() -> str:
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return os.uname().machine
    keep = [line for line in lines if line.startswith(("model name", "flags"))]
    return "\n".join(dict.fromkeys(keep))  # the first CPU's lines; all cores of a machine agree


def module_name(arch: str = "native") -> str:
    digest = hashlib.sha256(f"{arch}\n{' '.join(CFLAGS)}\n{_cpu_identity()}".encode())
    for name in SOURCES + HEADERS:
        digest.update((CSRC / name).read_bytes())
    return f"llmchat_quant_{digest.hexdigest()[:12]}"


@functools.cache
def load_cpu_kernels(build_dir: str, arch: str = "native") -> CpuKernels:
    """Compile on first use into `build_dir`/<module name>/, load; later calls (and processes) reuse the build.
    `arch` is g++'s -march: "native" in use; the tests also build "haswell" (AVX2 without VNNI) and "x86-64"
    (the scalar fallback) to check the code paths other machines take."""
    name = module_name(arch)
    folder = Path(build_dir) / name
    if (module := _import_built(folder / f"{name}.so", name)) is not None:  # a warm start: no ninja, no compiler
        return CpuKernels(module, f"quantized CPU kernels: {module.simd()}")
    try:
        from torch.utils import cpp_extension

        cpp_extension.verify_ninja_availability()
        folder.mkdir(parents=True, exist_ok=True)
        module = cpp_extension.load(
            name=name, sources=[str(CSRC / s) for s in SOURCES], build_directory=str(folder),
            extra_cflags=[*CFLAGS, f"-march={arch}"], extra_ldflags=["-fopenmp"],
            extra_include_paths=[str(CSRC)], verbose=False,
        )
    except (OSError, RuntimeError, ImportError) as e:  # no compiler, no ninja, a failed build
        reason = str(e).strip().splitlines()[-1] if str(e).strip() else type(e).__name__
        return CpuKernels(None, f"quantized CPU kernels unavailable ({reason[:200]}); using the slower torch path")
    return CpuKernels(module, f"quantized CPU kernels: {module.simd()}")


def _import_built(path: Path, name: str) -> ModuleType | None:
    """The extension an earlier process built (its name pins the sources and the CPU), or None. The linker
    writes the file last, so one that imports is whole; a damaged one fails to import and is rebuilt."""
    if not path.is_file():
        return None
    import importlib.util

    import torch  # noqa: F401  (the extension links against torch's libraries, loaded by this import)

    try:
        spec = importlib.util.spec_from_file_location(name, path)
        if spec is None or spec.loader is None:
            return None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    except (ImportError, OSError):
        return None
    return module
