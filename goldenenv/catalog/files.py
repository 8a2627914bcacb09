"""Where a catalog table's rows are, and how they are read: one table, several files.

data/<table>.csv (beside this module) holds the rows that belong to no cloud, fabric or accelerator family (GPUs,
models); goldenenv/clouds/<cloud>/catalog/<table>.csv holds one cloud's rows, without a `cloud` column,
goldenenv/fabrics/<fabric>/catalog/<table>.csv one fabric's rows, without a `fabric` column, and
goldenenv/accelerators/<family>/catalog/<table>.csv one accelerator family's (CUDA's driver minimums, Ascend's
torch_npu pairs), without an `accelerator` column: the reader fills the column from the folder's name. A shared
file need not have that column: its rows are then read with it empty (rows of no cloud or fabric, such as the
health rules every node is judged by). A new cloud or fabric adds its rows
in its own folder and edits no shared file, even to a table whose shared file has never had a row of one.
Files are read on first use and cached for the process.
"""
from __future__ import annotations

import csv
import functools
from importlib import resources
from importlib.resources.abc import Traversable
from typing import Iterator


def rows(table: str) -> list[dict[str, str]]:
    """The rows of a table as dicts (strings, as written): data/<table>.csv's first, then each cloud's, clouds in
    name order, then each fabric's, fabrics in name order, each file's rows in the order it writes them."""
    return list(_read(table))


def _folders(package: str) -> dict[str, Traversable]:
    """The catalog folder of each package under goldenenv/<package>/ that has one, by name, in name order.

    Found by listing the folder rather than importing it, so that reading a price never loads a cloud's provider
    SDK or a fabric's modules."""
    parent = resources.files("goldenenv").joinpath(package)
    return {entry.name: entry.joinpath("catalog") for entry in sorted(parent.iterdir(), key=lambda e: e.name)
            if entry.is_dir() and entry.joinpath("__init__.py").is_file() and entry.joinpath("catalog").is_dir()}


def cloud_folders() -> dict[str, Traversable]:
    """Each cloud's catalog folder (goldenenv/clouds/<cloud>/catalog/) by cloud name, in name order: every package
    under goldenenv/clouds/ is a cloud, as the cloud registry finds them."""
    return _folders("clouds")


def fabric_folders() -> dict[str, Traversable]:
    """Each fabric's catalog folder (goldenenv/fabrics/<fabric>/catalog/) by fabric name, in name order: every
    package under goldenenv/fabrics/ is a fabric, as the fabric registry finds them."""
    return _folders("fabrics")


def accelerator_folders() -> dict[str, Traversable]:
    """Each accelerator family's catalog folder (goldenenv/accelerators/<family>/catalog/), in name order."""
    return _folders("accelerators")


PACKAGES = {"cloud": "clouds", "fabric": "fabrics", "accelerator": "accelerators"}
"""The column a folder's rows are filled with, and the folder under goldenenv/ whose packages own such folders."""


def _owners() -> dict[str, dict[str, Traversable]]:
    """Each column's owners' folders, clouds', fabrics' then accelerator families' (found on each call, so that a
    test can add one)."""
    return {"cloud": cloud_folders(), "fabric": fabric_folders(), "accelerator": accelerator_folders()}


def _parts(table: str) -> list[tuple[tuple[str, str] | None, Traversable]]:
    """The files holding a table's rows: (None, the shared file) first, then ((column, owner), that owner's file)
    for each cloud, then for each fabric."""
    shared = resources.files(__package__).joinpath("data", f"{table}.csv")
    found: list[tuple[tuple[str, str] | None, Traversable]] = [(None, shared)] if shared.is_file() else []
    for column, folders in _owners().items():
        for owner, folder in folders.items():
            path = folder.joinpath(f"{table}.csv")
            if path.is_file():
                found.append(((column, owner), path))
    return found


def _where(owner: tuple[str, str] | None, table: str) -> str:
    if owner is None:
        return f"goldenenv/catalog/data/{table}.csv"
    return f"goldenenv/{PACKAGES[owner[0]]}/{owner[1]}/catalog/{table}.csv"


@functools.cache
def _read(table: str) -> tuple[dict[str, str], ...]:
    parts = _parts(table)
    if not parts:
        raise FileNotFoundError(f"the catalog has no table {table!r}: no goldenenv/catalog/data/{table}.csv and "
                                f"no goldenenv/clouds/<cloud>/catalog/{table}.csv or "
                                f"goldenenv/fabrics/<fabric>/catalog/{table}.csv")
    read: list[tuple[str, list[str], list[dict[str, str]]]] = []
    filled = list(dict.fromkeys(owner[0] for owner, _ in parts if owner is not None))
    for owner, path in parts:
        with path.open(newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f)
            header = list(reader.fieldnames or [])
            if owner is not None and owner[0] in header:
                raise ValueError(f"{_where(owner, table)} has a {owner[0]} column: its folder names the "
                                 f"{owner[0]}, so drop the column")
            # Every owner column the table has (a fabric's and an accelerator family's rules share health_thresholds),
            # blank in the shared file and in another kind of owner's file, the owner's name in its own.
            blank = {column: "" for column in filled if column not in header}
            if owner is not None:
                blank[owner[0]] = owner[1]
            read.append((_where(owner, table), [*blank, *header], [{**blank, **row} for row in reader]))
    # Every file of a table has the same columns in the same order, except that a file may add columns at the end
    # that only its rows fill (Huawei's host images state an NPU driver): the other files read them as empty.
    where, columns = max(((w, h) for w, h, _ in read), key=lambda item: len(item[1]), default=("", []))
    for other, header, _ in read:
        if header != columns[:len(header)]:
            raise ValueError(f"{other} has the columns {', '.join(header)}; {where} has {', '.join(columns)}: every "
                             "file of a table has the same columns (a file may only add columns at the end)")
    return tuple({**dict.fromkeys(columns, ""), **row} for _, _, rows in read for row in rows)


def tables() -> Iterator[str]:
    """Names of every table, shared or a cloud's or a fabric's, for the consistency test."""
    folders = [resources.files(__package__).joinpath("data"), *cloud_folders().values(), *fabric_folders().values(),
               *accelerator_folders().values()]
    yield from sorted({entry.name.removesuffix(".csv") for folder in folders for entry in folder.iterdir()
                       if entry.name.endswith(".csv")})
