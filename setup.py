"""Packaging is declared in pyproject.toml; this file adds the one thing package discovery there
cannot express: the repository's top-level tasks/ folder ships as the package `fsr_tasks`, so an
installed fsr (a wheel, `pip install .`) carries its built-in tasks. An editable install maps
`fsr_tasks` to the checkout's tasks/, so edits to a task take effect at once."""

from setuptools import find_namespace_packages, setup

setup(
    packages=[*find_namespace_packages(include=["fsr", "fsr.*", "cluster", "cluster.*"]), "fsr_tasks"],
    package_dir={"fsr_tasks": "tasks"},
)
