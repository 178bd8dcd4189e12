"""Packages: npusim/* plus the top-level isa/ folder (and its aton/ register map), shipped as `npusim.isa_data`."""

from setuptools import find_packages, setup

setup(packages=find_packages(include=["npusim", "npusim.*"]) + ["npusim.hw.profiles", "npusim.isa_data",
                                                                  "npusim.isa_data.aton"])
