"""The compiled modules, built by Cython on install: the loops of ``ftf`` and ``jct``
(adloader/scheduling/*_kernel.pyx). Everything else is in pyproject.toml."""

from Cython.Build import cythonize
from setuptools import Extension, setup

KERNELS = ("ftf_kernel", "jct_kernel")
setup(ext_modules=cythonize([Extension(f"adloader.scheduling.{k}", [f"adloader/scheduling/{k}.pyx"])
                             for k in KERNELS]))
