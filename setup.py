"""The one compiled part of Primus (the metadata is in setup.cfg): TFRecord framing in C,
primus/data/_framing.c, which Python's per-record loop made the bound of small records."""

from setuptools import Extension, setup

setup(ext_modules=[Extension("primus.data._framing", ["primus/data/_framing.c"],
                             extra_compile_args=["-O2", "-std=c11"])])
