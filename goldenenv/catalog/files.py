"""Where a catalog table's rows are, and how they are read: one table, several files.

data/<table>.csv (beside this module) holds the rows that belong to no cloud (GPUs, CUDA and driver minimums,
models); goldenenv/clouds/<cloud>/catalog/<table>.csv holds one cloud's rows, without a `cloud` column: the reader
fills it from the folder's name. A new cloud adds its rows in its own folder and edits no shared file. Files are
read on first use and cached for the process.
"""

from __future__ import annotations

import csv
import functools
from importlib import resources
from importlib.resources.abc import Traversable
from typing import Iterator


def rows(table: str) -> list[dict[str, str]]:
    """The rows of a table as dicts (strings, as written): data/<table>.csv's first, then each cloud's, clouds in
    name order, each file's rows in the order it writes them."""
    return list(_read(table))


def cloud_folders() -> dict[str, Traversable]:
    """Each cloud's catalog folder (goldenenv/clouds/<cloud>/catalog/) by cloud name, in name order.

    Found the way the cloud registry finds clouds (every package under goldenenv/clouds/ is one), by listing the
    folder rather than importing it, so that reading a price never loads a cloud's provider SDK.
    """
    clouds = resources.files("goldenenv").joinpath("clouds")
    return {entry.name: entry.joinpath("catalog") for entry in sorted(clouds.iterdir(), key=lambda e: e.name)
            if entry.is_dir() and entry.joinpath("__init__.py").is_file() and entry.joinpath("catalog").is_dir()}


def _parts(table: str) -> list[tuple[str | None, Traversable]]:
    """The files holding a table's rows: (None, the shared file) first, then (cloud, that cloud's file)."""
    shared = resources.files(__package__).joinpath("data", f"{table}.csv")
    found: list[tuple[str | None, Traversable]] = [(None, shared)] if shared.is_file() else []
    for cloud, folder in cloud_folders().items():
        path = folder.joinpath(f"{table}.csv")
        if path.is_file():
            found.append((cloud, path))
    return found


def _where(cloud: str | None, table: str) -> str:
    return f"goldenenv/clouds/{cloud}/catalog/{table}.csv" if cloud else f"goldenenv/catalog/data/{table}.csv"


@functools.cache
def _read(table: str) -> tuple[dict[str, str], ...]:
    parts = _parts(table)
    if not parts:
        raise FileNotFoundError(f"the catalog has no table {table!r}: no goldenenv/catalog/data/{table}.csv and "
                                f"no goldenenv/clouds/<cloud>/catalog/{table}.csv")
    found: list[dict[str, str]] = []
    columns: tuple[str, list[str]] | None = None
    for cloud, path in parts:
        with path.open(newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f)
            header = list(reader.fieldnames or [])
            if cloud is not None and "cloud" in header:
                raise ValueError(f"{_where(cloud, table)} has a cloud column: its folder names the cloud, so drop "
                                 "the column")
            if cloud is not None:
                header = ["cloud", *header]
            if columns is None:
                columns = (_where(cloud, table), header)
            elif header != columns[1]:
                raise ValueError(f"{_where(cloud, table)} has the columns {', '.join(header)}; {columns[0]} has "
                                 f"{', '.join(columns[1])}: every file of a table has the same columns")
            found.extend({"cloud": cloud, **row} if cloud is not None else row for row in reader)
    return tuple(found)


def tables() -> Iterator[str]:
    """Names of every table, shared or a cloud's, for the consistency test."""
    folders = [resources.files(__package__).joinpath("data"), *cloud_folders().values()]
    yield from sorted({entry.name.removesuffix(".csv") for folder in folders for entry in folder.iterdir()
                       if entry.name.endswith(".csv")})
