"""``tfgpu convert SOURCE OUTPUT_DIR``: images, tables or arrays to TFRecord shards with a manifest."""

from __future__ import annotations

import argparse

from tfgpu.cli import _common
from tfgpu.cli._progress import progress
from tfgpu.errors import ConfigError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "convert", help="convert images, CSV/Parquet or .npy/.npz to TFRecord shards with a manifest"
    )
    p.add_argument(
        "source",
        help="a folder of images (one subfolder per class), a .csv/.parquet table, or a .npy/.npz file",
    )
    p.add_argument("output", help="directory for the shards and manifest.json (re-running resumes)")
    p.add_argument("--shard-mb", type=float, default=128.0, help="target shard size in MiB (default 128)")
    p.add_argument(
        "--min-shards",
        type=int,
        default=16,
        help="never fewer shards than this, so every worker gets several (default 16)",
    )
    p.add_argument("--gzip", action="store_true", help="GZIP-compress the shards")
    p.add_argument("--resize", metavar="HxW", help="resize images offline, e.g. 224x224")
    p.add_argument(
        "--image-format",
        choices=("jpeg", "raw"),
        default="jpeg",
        help="store JPEG (compact) or decoded uint8 (fastest to read)",
    )
    p.add_argument("--quality", type=int, default=95, help="JPEG quality when re-encoding (default 95)")
    p.add_argument("--label", help="the label column / array (string labels become class indices)")
    p.add_argument("--columns", help="comma-separated columns to keep (tables)")
    p.add_argument("--image-column", help="a table column holding image paths (relative to the table)")
    p.add_argument(
        "--skip-bad", action="store_true", help="skip unreadable rows and count them instead of stopping"
    )
    p.add_argument(
        "--keep-order",
        action="store_true",
        help="image folders: write rows in listing order, class by class (default: shuffled once, so "
        "every shard holds every class)",
    )
    p.add_argument(
        "--workers", type=int, help="worker processes (default: one per core where they pay, measured)"
    )
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="delete the conversion already in OUTPUT and start over (a re-run otherwise resumes the same one only)",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(run=run)


def _size(text: str | None) -> tuple[int, int] | None:
    if not text:
        return None
    try:
        height, width = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise ConfigError("--resize must be HEIGHTxWIDTH", value=text, fix="pass --resize 224x224") from None
    return height, width


def run(args: argparse.Namespace) -> int:
    from tfgpu.data import ConvertOptions, convert

    options = ConvertOptions(
        target_shard_mb=args.shard_mb,
        min_shards=args.min_shards,
        compression="GZIP" if args.gzip else None,
        resize=_size(args.resize),
        image_format=args.image_format,
        jpeg_quality=args.quality,
        label=args.label,
        columns=tuple(c.strip() for c in args.columns.split(",")) if args.columns else None,
        image_column=args.image_column,
        skip_bad=args.skip_bad,
        keep_order=args.keep_order,
        workers=args.workers,
    )
    with progress("convert") as update:
        result = convert(
            args.source, args.output, options=options, on_progress=update, overwrite=args.overwrite
        )
    summary = result.to_dict()
    if args.json:
        _common.print_json(summary)
        return 0
    out = _common.out
    out.print(
        f"wrote {summary['rows']} rows in {summary['shards']} shards ({summary['bytes'] / 2**20:.1f} MiB) "
        f"to {summary['output']} in {summary['seconds']:.1f} s"
        + (f"; reused {summary['shards_reused']} complete shards" if summary["shards_reused"] else "")
    )
    if result.manifest.skipped:
        out.print(
            f"[yellow]skipped {len(result.manifest.skipped)} bad rows[/] (listed under 'skipped' in the manifest):"
        )
        for bad in result.manifest.skipped[:10]:
            out.print(f"  {bad['file']}: {bad['reason']}")
    out.print(f"manifest: {summary['manifest']}")
    return 0
