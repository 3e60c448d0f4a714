"""``PipelineOptions``: how ``tfgpu.data.pipeline`` builds a dataset, validated once, passed whole.

One frozen dataclass instead of keywords forwarded through several modules: ``Task.pipeline`` once
travelled as a dict that also carried the array-shuffle switch, and ``tfgpu.fit`` on a dataset
directory then failed inside ``plan()`` ("unexpected keyword argument 'shuffle'"). The shape is
orbit's ``StandardTrainerOptions`` and accelerate's ``DataLoaderConfiguration``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from tfgpu.errors import ConfigError, refuse_unknown

CACHE_MODES = ("auto", "memory", "disk", "off")
ON_CORRUPT = ("fail", "skip")


@dataclass(frozen=True, kw_only=True)
class PipelineOptions:
    """How ``tfgpu.data.pipeline`` reads, decodes, shuffles and batches a tfgpu dataset.

    Attributes:
        training: shuffle (see ``shuffle``), apply ``augment``, drop the remainder.
        shuffle: when training, shuffle files and examples each epoch; False keeps the stored
            order (``tfgpu.fit(..., shuffle=False)``).
        shuffle_buffer: examples in the shuffle buffer; None: max(1024, 16 batches), at most
            the rows.
        shuffle_files: shuffle the file order each epoch; None: as ``training and shuffle``.
        augment: fn(example dict) -> example dict, or tf.data's fn(image, label) -> (image, label)
            (fn(features, label) with several features), applied when training, after the cache.
        cache: "auto" (memory when the decoded data fits in a quarter of free RAM, disk
            otherwise), "memory", "disk" (under ``cache_dir``) or "off".
        cache_dir: where a disk cache goes (default: the temporary directory).
        deterministic: keep the order of parallel stages (True: reproducible, and on 2 cores
            measured faster than False, docs/benchmarks.md).
        with_ids: add each example's global row id (key "id"), used to keep prediction order.
        drop_remainder: None: when training.
        on_corrupt: "fail" (naming the file and record) or "skip" (skip and report them).
        image_size: decode and resize images to (height, width) when stored unresized.
        supervised: yield (features, label) instead of one dict.
        seed: the shuffles' seed (None: a new order each run).
        features: the schema, for a list of TFRecord files without a manifest.
        autotune: let tf.data's autotuner set parallelism and buffers (off: one call per core in
            every parallel stage; the autotuner settled on one core's worth in about half the
            runs on a 2-core machine).
        service: a tf.data service address (``tfgpu data-service`` prints it): everything up to
            batching runs on its workers, prefetch here.
        exactly_once: with ``service``, every example once per epoch (static sharding; None: when
            not training) rather than dynamic sharding.
    """

    training: bool = False
    shuffle: bool = True
    shuffle_buffer: int | None = None
    shuffle_files: bool | None = None
    augment: Callable[[dict[str, Any]], dict[str, Any]] | None = None
    cache: str = "auto"
    cache_dir: str | None = None
    deterministic: bool = True
    with_ids: bool = False
    drop_remainder: bool | None = None
    on_corrupt: str = "fail"
    image_size: tuple[int, int] | None = None
    supervised: bool = False
    seed: int | None = None
    features: Mapping[str, Any] | None = None
    autotune: bool = False
    service: str | None = None
    exactly_once: bool | None = None

    def __post_init__(self) -> None:
        if self.cache not in CACHE_MODES:
            raise ConfigError(
                f"cache must be one of {', '.join(CACHE_MODES)}", value=self.cache, fix="pass cache='auto'"
            )
        if self.on_corrupt not in ON_CORRUPT:
            raise ConfigError(
                "on_corrupt must be 'fail' or 'skip'",
                value=self.on_corrupt,
                fix="pass on_corrupt='skip' to skip and count bad records",
            )
        if self.shuffle_buffer is not None and (not _whole(self.shuffle_buffer) or self.shuffle_buffer < 1):
            raise ConfigError(
                "shuffle_buffer must be a whole number of at least 1",
                value=self.shuffle_buffer,
                fix="pass shuffle_buffer=10000, or leave it unset",
            )
        if self.image_size is not None and not (
            len(tuple(self.image_size)) == 2 and all(_whole(d) and d > 0 for d in self.image_size)
        ):
            raise ConfigError(
                "image_size must be (height, width) in pixels",
                value=self.image_size,
                fix="pass image_size=(224, 224)",
            )
        if self.augment is not None and not callable(self.augment):
            raise ConfigError(
                "augment must be a function: fn(example dict) -> example dict, or fn(image, label) -> (image, label)",
                value=type(self.augment).__name__,
                fix="pass augment=lambda example: {**example, 'image': tf.image.flip_left_right(example['image'])}",
            )

    @classmethod
    def names(cls) -> frozenset[str]:
        return frozenset(f.name for f in dataclasses.fields(cls))

    @classmethod
    def of(
        cls, options: PipelineOptions | Mapping[str, Any] | None = None, **overrides: Any
    ) -> PipelineOptions:
        """``options`` (or the defaults) with ``overrides``; a name that is no option is refused
        with the list of those there are."""
        given = dict(options) if isinstance(options, Mapping) else {}
        given.update(overrides)
        refuse_unknown(given, cls.names(), what="pipeline option")
        base = options if isinstance(options, PipelineOptions) else cls()
        return dataclasses.replace(base, **given)

    @property
    def shuffles(self) -> bool:
        """Examples are shuffled: training with ``shuffle`` on."""
        return self.training and self.shuffle

    @property
    def shuffles_files(self) -> bool:
        return self.shuffles if self.shuffle_files is None else self.shuffle_files

    @property
    def drops_remainder(self) -> bool:
        return self.training if self.drop_remainder is None else self.drop_remainder

    @property
    def exactly_once_reads(self) -> bool:
        return not self.training if self.exactly_once is None else self.exactly_once


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
