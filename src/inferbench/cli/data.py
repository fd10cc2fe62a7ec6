"""Verbs of the datasets (inferbench.data): generate a raw file in the real format, download the real
one, clean and encode it into the table the MLPs train on."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from inferbench.cli.args import arguments, json_value, required_paths
from inferbench.core.errors import UserError
from inferbench.data import DATASETS

log = logging.getLogger("inferbench")


def _generate_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dataset", choices=DATASETS, required=True)
    p.add_argument("--options", type=json_value, default={}, help="config `datasets.<dataset>`, JSON")
    p.add_argument("--out-dir", type=Path, required=True)


@arguments(_generate_arguments)
def generate_data(args: argparse.Namespace) -> None:
    info = DATASETS[args.dataset]
    info.load().generate(args.out_dir, **{k: v for k, v in args.options.items() if k in info.generate_options})


def _download_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dataset", choices=DATASETS, required=True)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--kaggle-dataset", default="wordsforthewise/lending-club")
    p.add_argument("--url", action="append", help="UCI URL to try (repeatable; default: the archive's two)")


@arguments(_download_arguments)
def download(args: argparse.Namespace) -> None:
    from inferbench.data import download

    if DATASETS[args.dataset].download_source == "kaggle":
        download.download_lendingclub(args.out, dataset=args.kaggle_dataset)
    else:
        urls = args.url or download.UCI_URLS
        if plain := [u for u in urls if not u.startswith("https://")]:  # as the config schema demands
            raise UserError(f"only https:// URLs are downloaded, not {', '.join(plain)}")
        download.download_heart(args.out, urls=urls)
    log.info("downloaded and verified %s", args.out)


def _prepare_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dataset", choices=DATASETS, required=True)
    p.add_argument("--options", type=json_value, default={}, help="config `datasets.<dataset>`, JSON")
    required_paths(p, "--raw", "--out", "--encoders", "--stats")


@arguments(_prepare_arguments)
def prepare_data(args: argparse.Namespace) -> None:
    from inferbench.core.fsutil import atomic_path, write_json

    info = DATASETS[args.dataset]
    options = {k: v for k, v in args.options.items() if k in info.clean_options and v is not None}
    table, encoder, stats = info.load().clean(args.raw, **options)
    stats["source"] = args.options.get("source", "synthetic")
    stats["raw_file"] = str(args.raw)
    with atomic_path(args.out) as tmp:
        table.to_parquet(tmp, index=False)
    encoder.save(args.encoders)
    write_json(args.stats, stats)
