"""Packages: npusim/* plus the top-level isa/ folder, shipped as `npusim.isa_data`."""

from setuptools import find_packages, setup

setup(packages=find_packages(include=["npusim", "npusim.*"]) + ["npusim.isa_data"])
