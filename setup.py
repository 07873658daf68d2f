"""The compiled Newton kernel (libra_astra/optimize/_newton_kernel.pyx). Everything else is in
pyproject.toml. The kernel is optional: without Cython or a C compiler the package installs
without it and the solver runs its numpy Newton system instead (same method, same results to
round-off)."""

from setuptools import Extension, setup

try:
    from Cython.Build import cythonize
except ImportError:          # no Cython: the numpy Newton system only
    ext_modules = []
else:
    ext_modules = cythonize([Extension("libra_astra.optimize._newton_kernel",
                                       ["libra_astra/optimize/_newton_kernel.pyx"])],
                            language_level=3, quiet=True)
    for ext in ext_modules:
        ext.optional = True  # a failed compile leaves the numpy system (cythonize drops the flag)

setup(ext_modules=ext_modules)
