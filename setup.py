"""The compiled kernels: the solver's Newton system (libra_astra/optimize/_newton_kernel.pyx),
the replay's fixed-order pass (libra_astra/timing/_fixed_pass.pyx), and the trace reader's
attribute-block ids (libra_astra/traces/_attr_keys.pyx) and one-pass batch walk
(libra_astra/traces/_walk.pyx). Everything else is in pyproject.toml.
All are optional: without Cython or a C compiler the package installs without them and runs
their Python versions instead (the numpy Newton system: same method, same results to round-off;
the Python pass: the same ends to the last bit; the numpy block ids and batch walk: the same programs and errors)."""

from setuptools import Extension, setup

try:
    from Cython.Build import cythonize
except ImportError:          # no Cython: the numpy Newton system and the Python pass only
    ext_modules = []
else:
    ext_modules = cythonize([Extension("libra_astra.optimize._newton_kernel",
                                       ["libra_astra/optimize/_newton_kernel.pyx"]),
                             Extension("libra_astra.timing._fixed_pass",
                                       ["libra_astra/timing/_fixed_pass.pyx"]),
                             Extension("libra_astra.traces._attr_keys",
                                       ["libra_astra/traces/_attr_keys.pyx"]),
                             Extension("libra_astra.traces._walk",
                                       ["libra_astra/traces/_walk.pyx"])],
                            language_level=3, quiet=True)
    for ext in ext_modules:
        ext.optional = True  # a failed compile leaves the Python versions (cythonize drops the flag)

setup(ext_modules=ext_modules)
