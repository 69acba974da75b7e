"""The compiled modules, built on install where they can be: the loops of ``ftf`` and ``jct``
(adloader/scheduling/kernels/*_kernel.py, Cython's pure-Python mode). Optional: without Cython the C
files Cython made (an sdist carries them where they were made) are compiled; without a
compiler, or when a build fails, the install goes on without them and the same modules run
as plain Python (the same plans, slower). Everything else is in pyproject.toml."""

from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

KERNELS = ("ftf_kernel", "jct_kernel")
HERE = Path(__file__).resolve().parent
SKIPPED = ("adloader: the compiled loops ({name}) were not built ({why}); adloader runs the "
           "same modules as plain Python instead (the same plans, slower)")


def _extensions() -> list[Extension]:
    """Each kernel from its .py with Cython, else from the C file beside it, else none."""
    try:
        from Cython.Build import cythonize
    except ImportError:
        cythonize = None
    sources = [f"adloader/scheduling/kernels/{k}.py" for k in KERNELS]
    if cythonize is not None:
        return cythonize([Extension(f"adloader.scheduling.kernels.{k}", [p])
                          for k, p in zip(KERNELS, sources, strict=True)])
    found = [k for k in KERNELS if (HERE / f"adloader/scheduling/kernels/{k}.c").exists()]
    if len(found) < len(KERNELS):
        print(SKIPPED.format(name=", ".join(KERNELS), why="no Cython and no C files"))
    return [Extension(f"adloader.scheduling.kernels.{k}", [f"adloader/scheduling/kernels/{k}.c"])
            for k in found]


class OptionalBuildExt(build_ext):
    """A kernel that does not build is left out, with a warning: never a failed install."""

    def run(self):
        try:
            super().run()
        except Exception as exc:  # no compiler at all (DistutilsPlatformError and kin)
            print(SKIPPED.format(name=", ".join(KERNELS), why=exc))

    def build_extension(self, ext):
        try:
            super().build_extension(ext)
        except Exception as exc:  # CC fails, a header is missing, the link fails
            print(SKIPPED.format(name=ext.name, why=f"{type(exc).__name__}: {exc}"))


setup(ext_modules=_extensions(), cmdclass={"build_ext": OptionalBuildExt})
